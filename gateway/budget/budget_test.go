package budget

import (
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := New(Config{Ratio: 0.1, Floor: 2, Window: 10 * time.Second})
	for i := 0; i < 100; i++ {
		b.Request(t0)
	}
	allowed := 0
	for i := 0; i < 50; i++ {
		if b.TryRetry(t0) {
			allowed++
		}
	}
	if allowed != 12 { // 0.1·100 + 2
		t.Fatalf("allowed %d retries, want 12", allowed)
	}
	// Half a window later the old requests still count.
	if b.TryRetry(t0.Add(5 * time.Second)) {
		t.Fatal("retry allowed over budget")
	}
	// A whole window later everything expired: only the floor.
	later := t0.Add(11 * time.Second)
	if r, tr := b.Window(later); r != 0 || tr != 0 {
		t.Fatalf("window not expired: %d requests %d retries", r, tr)
	}
	first, second, third := b.TryRetry(later), b.TryRetry(later), b.TryRetry(later)
	if !first || !second || third {
		t.Fatalf("floor of 2 not applied: retries allowed %v %v %v", first, second, third)
	}
}
