package fleet

import (
	"math"
	"testing"
)

// TestGuardFor: the optimizer's and replay's settings give a guard with
// a registry or a positive gain, none with neither, and refuse a gain in
// (0, 1].
func TestGuardFor(t *testing.T) {
	reg, err := New(Engine{ID: "e1", URL: "http://e1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		reg     *Registry
		gain    float64
		want    float64 // the guard's gain; 0: no guard
		wantErr bool
	}{
		{"nothing", nil, 0, 0, false},
		{"negative_alone", nil, -1, 0, false},
		{"registry_default", reg, 0, DefaultMaxGain, false},
		{"registry_no_bounds", reg, -1, math.Inf(1), false},
		{"gain_alone", nil, 3, 3, false},
		{"gain_too_small", reg, 0.5, 0, true},
		{"gain_one", nil, 1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := GuardFor(tc.reg, tc.gain)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			switch {
			case tc.want == 0 && g != nil:
				t.Errorf("guard with gain %v, want none", g.gain)
			case tc.want != 0 && (g == nil || g.gain != tc.want || g.reg != tc.reg):
				t.Errorf("guard %+v, want gain %v over %p", g, tc.want, tc.reg)
			}
		})
	}
}
