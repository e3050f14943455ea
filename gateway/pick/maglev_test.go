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
	m := maglevSize(n, per)
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

// skewedEngines returns n engines whose shares span three orders of
// magnitude, so that most engines run out of quota long before the last
// slots are filled.
func skewedEngines(n int) []Engine {
	engines := make([]Engine, n)
	var sum float64
	for i := range engines {
		w := math.Pow(1000, float64(i%17)/16)
		engines[i] = Engine{ID: fmt.Sprintf("skew-%d", i), Share: w}
		sum += w
	}
	for i := range engines {
		engines[i].Share /= sum
	}
	return engines
}

// TestMaglevMatchesDivision: maglev (bitmap, four probes a step, the
// last free slots found by arithmetic) fills the table exactly as the
// textbook modulo formula does, for equal-ish and skewed weights.
func TestMaglevMatchesDivision(t *testing.T) {
	for _, n := range []int{1, 2, 7, 64, 257, 1000, 5000} {
		for _, per := range []int{1, 16, 64} {
			for name, engines := range map[string][]Engine{"even": testEngines(n), "skewed": skewedEngines(n)} {
				if got, want := maglev(engines, per), maglevByDivision(engines, per); !slices.Equal(got, want) {
					t.Fatalf("%s, %d engines, %d slots each: tables differ", name, n, per)
				}
			}
		}
	}
}

// TestMaglevSize: up to 256 engines a table has the first prime at least
// 64 slots an engine (and 4093), as it always had, so those tables are
// unchanged; beyond, at least 16 an engine and never fewer than at 256.
func TestMaglevSize(t *testing.T) {
	for n := 1; n <= 256; n++ {
		if got, want := maglevSize(n, 64), nextPrime(max(64*n, 4093)); got != want {
			t.Fatalf("%d engines: %d slots, want %d", n, got, want)
		}
	}
	for _, c := range []struct{ n, want int }{{257, 16411}, {1000, 16411}, {1024, 16411}, {1025, 16411}, {1100, 17609}, {20000, 320009}} {
		if got := maglevSize(c.n, 64); got != c.want {
			t.Errorf("%d engines: %d slots, want %d", c.n, got, c.want)
		}
	}
}

// TestMaglevReuse: a pool reuses its latest table exactly when the
// engines (ids in order) and their slot counts are unchanged, and a
// reused table equals the one a fresh pool builds.
func TestMaglevReuse(t *testing.T) {
	base := specs(300, func(i int) float64 { return 1 + float64(i%5) })
	moved := slices.Clone(base)
	moved[0].Weight, moved[1].Weight = moved[1].Weight, moved[0].Weight
	tiny := slices.Clone(base) // slot counts unchanged
	tiny[7].Weight *= 1 + 1e-9
	reordered := slices.Clone(base)
	reordered[3], reordered[4] = reordered[4], reordered[3]
	p := NewPool()
	first := mustBuild(t, p, base, Options{})
	for _, c := range []struct {
		name   string
		specs  []Spec
		reused bool
	}{
		{"same", base, true},
		{"weights moved by less than a slot", tiny, true},
		{"weights moved", moved, false},
		{"back", base, false},
		{"same again", base, true},
		{"reordered", reordered, false},
	} {
		prev := p.last.slots
		tb := mustBuild(t, p, c.specs, Options{})
		if got := &tb.slots[0] == &prev[0]; got != c.reused {
			t.Errorf("%s: reused %v, want %v", c.name, got, c.reused)
		}
		if fresh := mustBuild(t, NewPool(), c.specs, Options{}); !slices.Equal(tb.slots, fresh.slots) {
			t.Errorf("%s: table differs from a fresh pool's", c.name)
		}
	}
	if again := mustBuild(t, p, base, Options{}); !slices.Equal(again.slots, first.slots) {
		t.Error("the same specs built a different table")
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

// BenchmarkMaglevBuild20000: the table of a 20,000-engine snapshot
// (320,009 slots).
func BenchmarkMaglevBuild20000(b *testing.B) {
	engines := testEngines(20000)
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
