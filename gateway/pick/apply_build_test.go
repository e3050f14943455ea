package pick

import (
	"errors"
	"fmt"
	"slices"
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

// TestBuildSameEnginesMatchesLookup: a build over the engines of the
// pool's last table (which takes their states and salts from it) makes
// the table that looking every engine up makes, also with states added
// since, engines of weight 0 and the least-loaded fallback.
func TestBuildSameEnginesMatchesLookup(t *testing.T) {
	specs := func(weights ...float64) []Spec {
		s := make([]Spec, len(weights))
		for i, w := range weights {
			s[i] = Spec{ID: string(rune('a' + i)), URL: "http://" + string(rune('a'+i)), Weight: w, RTTms: float64(i), MaxConcurrency: i}
		}
		return s
	}
	fast, slow := NewPool(), NewPool()
	first := specs(1, 2, 3, 4, 5, 6)
	for _, p := range []*Pool{fast, slow} {
		if _, err := p.Build(first, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	for k, c := range []struct {
		specs []Spec
		opt   Options
		grow  bool // a state added before the build
	}{
		{specs(2, 2, 3, 4, 5, 1), Options{}, false},
		{specs(2, 2, 3, 4, 5, 9), Options{}, true},
		{specs(2, 0, 3, 4, 5, 9), Options{}, false}, // one of weight 0
		{specs(1, 1, 1, 1, 1, 1), Options{LeastLoaded: true}, true},
		{specs(3, 1, 1, 1, 1, 1), Options{}, false},
	} {
		if c.grow {
			fast.State(fmt.Sprint("grown", k))
			slow.State(fmt.Sprint("grown", k))
		}
		// slow's last table is another one: it looks every engine up.
		if _, err := slow.Build(first[:1], Options{}); err != nil {
			t.Fatal(err)
		}
		a, err := fast.Build(c.specs, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		b, err := slow.Build(c.specs, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		if a.Len() != b.Len() || !slices.Equal(a.slots, b.slots) || !slices.Equal(a.byPool, b.byPool) {
			t.Fatalf("case %d: tables differ: %d slots %v / %d slots %v", k, len(a.slots), a.byPool, len(b.slots), b.byPool)
		}
		for i := 0; i < a.Len(); i++ {
			x, y := a.Engine(i), b.Engine(i)
			if x.ID != y.ID || x.URL != y.URL || x.Share != y.Share || x.RTTms != y.RTTms || x.Slots != y.Slots ||
				x.State.idx != y.State.idx || x.salt != y.salt {
				t.Fatalf("case %d, engine %d: %+v, want %+v", k, i, *x, *y)
			}
		}
	}
	// A duplicate is refused though the rest is the last table's.
	dup := specs(1, 2, 3, 4, 5, 6)
	dup[5].ID = "a"
	if _, err := fast.Build(dup, Options{}); !errors.Is(err, ErrBadWeight) {
		t.Errorf("duplicate: err %v", err)
	}
}
