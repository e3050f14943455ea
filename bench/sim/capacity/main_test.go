package main

import (
	"fmt"
	"io"
	"math"
	"testing"
)

// The hetero-slots scenarios replay their trace at the load their names
// state, against the capacity this command measures (within 1%): a
// change to the engine model or the trace reader that moves the capacity
// shows here, and their time_scale must follow.
func TestHeteroSlotsLoadFactors(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates each engine of three scenarios to saturation")
	}
	for _, load := range []float64{0.7, 0.9, 1.1} {
		t.Run(fmt.Sprint(load), func(t *testing.T) {
			path := fmt.Sprintf("../../../simulator/testdata/scenarios/hetero-slots-%.1fx.json", load)
			rate, capacity, err := run(path, "", io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := rate / capacity; math.Abs(got-load) > 0.01*load {
				t.Fatalf("%s: %.3f requests/s on a capacity of %.3f: %.3fx, want %.1fx", path, rate, capacity, got, load)
			}
		})
	}
}

func TestScenarioIsRequired(t *testing.T) {
	if _, _, err := run("", "", io.Discard); err == nil {
		t.Fatal("no error without -scenario")
	}
}
