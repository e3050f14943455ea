package pick

import (
	"fmt"
	"testing"
	"unsafe"
)

// TestStateLayout: State is stateSize bytes, the fields a pick reads
// (flags to prefill, and the model's known, lastMs, a and p) lie in its
// first 64 bytes, and the pool's States start on a 64-byte boundary, so
// a candidate's checks and score read one cache line of it.
func TestStateLayout(t *testing.T) {
	var s State
	if got := unsafe.Sizeof(s); got != stateSize {
		t.Fatalf("State is %d bytes, want %d (stateUsed %d)", got, stateSize, stateUsed)
	}
	if got := unsafe.Sizeof(s.model); got != modelSize {
		t.Fatalf("model is %d bytes, modelSize says %d", got, modelSize)
	}
	m := unsafe.Offsetof(s.model)
	for name, end := range map[string]uintptr{
		"flags":    unsafe.Offsetof(s.flags) + 4,
		"reject":   unsafe.Offsetof(s.reject) + 4,
		"inflight": unsafe.Offsetof(s.inflight) + 8,
		"limit":    unsafe.Offsetof(s.limit) + 8,
		"prefill":  unsafe.Offsetof(s.prefill) + 8,
		"known":    m + unsafe.Offsetof(s.model.known) + 1,
		"lastMs":   m + unsafe.Offsetof(s.model.lastMs) + 8,
		"a":        m + unsafe.Offsetof(s.model.a) + 8,
		"p":        m + unsafe.Offsetof(s.model.p) + 8,
	} {
		if end > 64 {
			t.Errorf("State.%s ends at byte %d, past the first cache line", name, end)
		}
	}
	p := NewPool()
	for i := range 100 {
		st := p.State(fmt.Sprint("e", i))
		if a := uintptr(unsafe.Pointer(st)); a%64 != 0 {
			t.Fatalf("State %d at %#x, not 64-byte aligned", i, a)
		}
	}
}
