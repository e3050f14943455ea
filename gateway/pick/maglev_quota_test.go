package pick

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// maglevQuotasBySort is maglevQuotas as it was: every remainder sorted,
// then one more slot each to the first m-Σ⌊share·m⌋.
func maglevQuotasBySort(engines []Engine, m int) []int {
	n := len(engines)
	quota := make([]int, n)
	type rem struct {
		i int
		f float64
	}
	rems := make([]rem, n)
	used := 0
	for i := range engines {
		x := engines[i].Share * float64(m)
		q := max(int(x), 1)
		quota[i] = q
		used += q
		rems[i] = rem{i, x - math.Floor(x)}
	}
	slices.SortFunc(rems, func(a, b rem) int {
		if c := cmp.Compare(b.f, a.f); c != 0 {
			return c
		}
		return a.i - b.i
	})
	for k := 0; used < m; k = (k + 1) % n {
		quota[rems[k].i]++
		used++
	}
	for used > m {
		big := 0
		for i := range quota {
			if quota[i] > quota[big] {
				big = i
			}
		}
		quota[big]--
		used--
	}
	return quota
}

// TestMaglevQuotasMatchSort: the selection gives every engine the quota
// the full sort gave, on equal, graded, skewed, random and tiny shares
// (ties by index included) and on inputs ordered to defeat the pivots.
func TestMaglevQuotasMatchSort(t *testing.T) {
	equal := func(n int) []Engine {
		e := make([]Engine, n)
		for i := range e {
			e[i] = Engine{ID: fmt.Sprint(i), Share: 1 / float64(n)}
		}
		return e
	}
	random := func(n int, seed uint64) []Engine {
		r := rand.New(rand.NewPCG(seed, 1))
		e := make([]Engine, n)
		sum := 0.0
		for i := range e {
			w := r.Float64()
			switch r.IntN(4) {
			case 0:
				w = 1 // ties
			case 1:
				w *= 1e-6 // below a slot: the minimum of one
			}
			e[i] = Engine{ID: fmt.Sprint(i), Share: w}
			sum += w
		}
		for i := range e {
			e[i].Share /= sum
		}
		return e
	}
	sets := [][]Engine{equal(1), equal(2), equal(3), equal(257), equal(1000), testEngines(5), testEngines(1000), skewedEngines(5000)}
	for seed := range uint64(40) {
		sets = append(sets, random(1+int(seed*seed*7)%3000, seed))
	}
	// Sorted either way, and organ-pipe: each pivot choice's bad case.
	for _, n := range []int{100, 1000} {
		e := random(n, 99)
		slices.SortFunc(e, func(a, b Engine) int {
			return cmp.Compare(a.Share*1e6-math.Floor(a.Share*1e6), b.Share*1e6-math.Floor(b.Share*1e6))
		})
		sets = append(sets, e, slices.Clone(e))
		slices.Reverse(sets[len(sets)-1])
		pipe := append(slices.Clone(e[:n/2]), e[n/2:]...)
		slices.Reverse(pipe[n/2:])
		sets = append(sets, pipe)
	}
	for k, engines := range sets {
		for _, per := range []int{1, 16, 64} {
			m := maglevSize(len(engines), per)
			got, want := maglevQuotas(engines, m), maglevQuotasBySort(engines, m)
			if !slices.Equal(got, want) {
				t.Fatalf("set %d (%d engines), m %d: quotas differ", k, len(engines), m)
			}
		}
	}
}
