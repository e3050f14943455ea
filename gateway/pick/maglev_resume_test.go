package pick

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMaglevResumeMatchesFresh: a pool's fill that resumes its last
// one (the same engines, other weights) gives the table a fresh fill
// gives, over chains of weight changes of one, some or every engine,
// large and small, and it does resume.
func TestMaglevResumeMatchesFresh(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	resumed := 0
	for _, c := range []struct{ n, per int }{{1, 64}, {2, 64}, {3, 64}, {40, 64}, {257, 64}, {1000, 64}, {1000, 16}, {5000, 1}, {3000, 64}} {
		engines := testEngines(c.n)
		if c.n == 3000 {
			engines = skewedEngines(c.n)
		}
		p := NewPool()
		for step := range 6 {
			next := slices.Clone(engines)
			switch step % 3 {
			case 0: // one engine
				next[r.IntN(c.n)].Share *= 1 + r.Float64()
			case 1: // a few, a little
				for range 1 + c.n/50 {
					next[r.IntN(c.n)].Share *= 1 + 0.01*r.Float64()
				}
			case 2: // all
				for i := range next {
					next[i].Share *= 0.5 + r.Float64()
				}
			}
			sum := 0.0
			for _, e := range next {
				sum += e.Share
			}
			for i := range next {
				next[i].Share /= sum
			}
			if m := maglevSize(c.n, c.per); p.last.sameEngines(next) && len(p.last.slots) == m {
				// What the fill below starts from.
				probe := make([]maglevProbe, c.n)
				for i := range probe {
					probe[i].skip = 1
				}
				var order []int32
				if maglevResume(&p.last, maglevQuotas(next, m), probe, make([]int32, m), &order, make([]uint64, (m+63)/64), uint64(m)) > 0 {
					resumed++
				}
			}
			got := p.maglev(next, c.per)
			want := maglev(next, c.per)
			if !slices.Equal(got, want) {
				t.Fatalf("%d engines, %d per engine, step %d: the resumed fill differs from a fresh one", c.n, c.per, step)
			}
			if again := p.maglev(next, c.per); !slices.Equal(again, want) { // the same shares: kept
				t.Fatalf("%d engines, %d per engine, step %d: the same shares again give another table", c.n, c.per, step)
			}
			engines = next
		}
	}
	if resumed < 20 {
		t.Errorf("only %d fills could resume", resumed)
	}
}

// BenchmarkMaglevResume is a pool's fill of 1,000 engines whose weights
// all move each time (as bench/fanout's -weights vary), resuming the
// last fill; BenchmarkMaglevBuild is the fresh fill of the same size.
func BenchmarkMaglevResume(b *testing.B) {
	const n = 1000
	ids := testEngines(n)
	var plans [][]Engine
	for v := range 8 {
		e := make([]Engine, n)
		sum := 0.0
		for j := range e {
			e[j] = Engine{ID: ids[j].ID, Share: 1 + float64((j*7919+v*104729)%101)/200}
			sum += e[j].Share
		}
		for j := range e {
			e[j].Share /= sum
		}
		plans = append(plans, e)
	}
	p := NewPool()
	p.maglev(plans[0], 64)
	b.ReportAllocs()
	k := 1
	for b.Loop() {
		p.maglev(plans[k%len(plans)], 64)
		k++
	}
}
