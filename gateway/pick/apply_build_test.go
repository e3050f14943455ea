package pick

import (
	"errors"
	"testing"
)

// TestBuildDuplicatesKnownAndNew: an id listed twice is refused whether
// the pool knows it already or not, and a refused build adds no state.
func TestBuildDuplicatesKnownAndNew(t *testing.T) {
	p := NewPool()
	if _, err := p.Build([]Spec{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}}, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, specs := range [][]Spec{
		{{ID: "a", Weight: 1}, {ID: "a", Weight: 1}},                       // known
		{{ID: "x", Weight: 1}, {ID: "y", Weight: 1}, {ID: "x", Weight: 1}}, // new
		{{ID: "a", Weight: 1}, {ID: "x", Weight: 0}, {ID: "x", Weight: 1}}, // new, the first of weight 0
	} {
		if _, err := p.Build(specs, Options{}); !errors.Is(err, ErrBadWeight) {
			t.Errorf("%v: err %v", specs, err)
		}
	}
	if _, err := p.Build([]Spec{{ID: "z", Weight: 1}, {ID: "w", Weight: -1}}, Options{}); !errors.Is(err, ErrBadWeight) {
		t.Errorf("negative weight: err %v", err)
	}
	if _, ok := p.Lookup("x"); ok {
		t.Error("a refused build created a state")
	}
	if _, ok := p.Lookup("z"); ok {
		t.Error("a refused build created a state")
	}
	// New states are numbered in the order of the specs, engines of
	// weight 0 left out.
	tb, err := p.Build([]Spec{{ID: "b", Weight: 1}, {ID: "n1", Weight: 0}, {ID: "n2", Weight: 1}, {ID: "n3", Weight: 2}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tb.Len() != 3 || tb.Engine(1).State.idx != 2 || tb.Engine(2).State.idx != 3 {
		t.Errorf("states %d %d", tb.Engine(1).State.idx, tb.Engine(2).State.idx)
	}
	if _, ok := p.Lookup("n1"); ok {
		t.Error("an engine of weight 0 got a state")
	}
}
