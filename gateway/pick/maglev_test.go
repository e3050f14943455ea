package pick

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// maglevByDivision is the textbook population (offset + next·skip mod m
// per probe) that maglev computes incrementally.
func maglevByDivision(engines []Engine, per int) []int32 {
	n := len(engines)
	m := nextPrime(max(per*n, 4093))
	quota := maglevQuotas(engines, m)
	offset := make([]uint64, n)
	skip := make([]uint64, n)
	next := make([]uint64, n)
	for i := range engines {
		offset[i] = hashString(engines[i].ID, 0x243f6a8885a308d3) % uint64(m)
		skip[i] = hashString(engines[i].ID, 0x13198a2e03707344)%uint64(m-1) + 1
	}
	slots := make([]int32, m)
	for i := range slots {
		slots[i] = -1
	}
	active := make([]int, n)
	for i := range active {
		active[i] = i
	}
	for filled := 0; filled < m; {
		w := 0
		for _, i := range active {
			for {
				c := (offset[i] + next[i]*skip[i]) % uint64(m)
				next[i]++
				if slots[c] < 0 {
					slots[c] = int32(i)
					break
				}
			}
			filled++
			quota[i]--
			if quota[i] > 0 {
				active[w] = i
				w++
			}
			if filled == m {
				break
			}
		}
		active = active[:w]
	}
	return slots
}

func testEngines(n int) []Engine {
	engines := make([]Engine, n)
	var sum float64
	for i := range engines {
		w := 1 + math.Mod(float64(i)*0.618, 3)
		engines[i] = Engine{ID: fmt.Sprintf("engine-%04d", i), Share: w}
		sum += w
	}
	for i := range engines {
		engines[i].Share /= sum
	}
	return engines
}

// TestMaglevMatchesDivision: the incremental probe sequence fills the
// table exactly as the textbook modulo formula does.
func TestMaglevMatchesDivision(t *testing.T) {
	for _, n := range []int{1, 2, 7, 64, 1000} {
		for _, per := range []int{1, 16, 64} {
			engines := testEngines(n)
			if got, want := maglev(engines, per), maglevByDivision(engines, per); !slices.Equal(got, want) {
				t.Fatalf("%d engines, %d slots each: tables differ", n, per)
			}
		}
	}
}

// BenchmarkMaglevBuild: building the table for a 1,000-engine snapshot,
// the larger part of applying one in a gateway.
func BenchmarkMaglevBuild(b *testing.B) {
	engines := testEngines(1000)
	b.ReportAllocs()
	for b.Loop() {
		maglev(engines, 64)
	}
}

// BenchmarkMaglevBuildByDivision is the same population with a division
// per probe, the peer of BenchmarkMaglevBuild.
func BenchmarkMaglevBuildByDivision(b *testing.B) {
	engines := testEngines(1000)
	b.ReportAllocs()
	for b.Loop() {
		maglevByDivision(engines, 64)
	}
}
