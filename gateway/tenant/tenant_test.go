package tenant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/shed"
)

func TestParseGood(t *testing.T) {
	b, err := os.ReadFile("testdata/tenants.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	acme, free := s.Lookup("sk-acme"), s.Lookup("sk-free")
	if acme == nil || acme.Name != "acme" || acme.Priority != shed.High || acme.MaxConcurrency != 2 || acme.Weight != 3 {
		t.Fatalf("acme: %+v", acme)
	}
	if free == nil || free.Name != "free" || free.Priority != shed.Low || free.Rate != 1 || free.Burst != 2 || free.Weight != 1 {
		t.Fatalf("free: %+v", free)
	}
	if s.Lookup("sk-other") != nil || s.Lookup("") != nil {
		t.Fatal("unknown key found")
	}
}

func TestParseBad(t *testing.T) {
	key := HashKey("k")
	for name, file := range map[string]string{
		"not yaml":        "tenants: [",
		"unknown field":   "tenants:\n  - name: a\n    keys: [" + key + "]\n    colour: red\n",
		"no name":         "tenants:\n  - keys: [" + key + "]\n",
		"twice":           "tenants:\n  - name: a\n    keys: [" + key + "]\n  - name: a\n    keys: [" + HashKey("j") + "]\n",
		"no keys":         "tenants:\n  - name: a\n",
		"raw key":         "tenants:\n  - name: a\n    keys: [sk-live-123]\n",
		"long key":        "tenants:\n  - name: a\n    keys: [" + key + "00]\n",
		"not hex":         "tenants:\n  - name: a\n    keys: [" + strings.Repeat("z", 64) + "]\n",
		"shared key":      "tenants:\n  - name: a\n    keys: [" + key + "]\n  - name: b\n    keys: [" + key + "]\n",
		"bad priority":    "tenants:\n  - name: a\n    priority: urgent\n    keys: [" + key + "]\n",
		"negative rate":   "tenants:\n  - name: a\n    rate: -1\n    keys: [" + key + "]\n",
		"negative limit":  "tenants:\n  - name: a\n    max_concurrency: -1\n    keys: [" + key + "]\n",
		"zero weight":     "tenants:\n  - name: a\n    weight: 0\n    keys: [" + key + "]\n",
		"negative weight": "tenants:\n  - name: a\n    weight: -2\n    keys: [" + key + "]\n",
		"infinite weight": "tenants:\n  - name: a\n    weight: .inf\n    keys: [" + key + "]\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(file), nil); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
}

func TestTokenBucket(t *testing.T) {
	s, err := Parse([]byte("tenants:\n  - name: a\n    rate: 2\n    burst: 3\n    keys: ["+HashKey("k")+"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tn := s.Lookup("k")
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := tn.Allow(now); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, after := tn.Allow(now)
	if ok || after != 500*time.Millisecond {
		t.Fatalf("4th at once: ok %v retry after %v, want refused for 500ms", ok, after)
	}
	if ok, _ := tn.Allow(now.Add(500 * time.Millisecond)); !ok {
		t.Fatal("refused after the refill")
	}
	// 10 s idle refills only up to the burst.
	now = now.Add(10 * time.Second)
	n := 0
	for ok, _ := tn.Allow(now); ok; ok, _ = tn.Allow(now) {
		n++
	}
	if n != 3 {
		t.Fatalf("%d requests after a long idle, want the burst 3", n)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	s, err := Parse([]byte("tenants:\n  - name: a\n    max_concurrency: 2\n    keys: ["+HashKey("k")+"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tn := s.Lookup("k")
	for i, want := range []bool{true, true, false} {
		if got := tn.Start(); got != want {
			t.Fatalf("start %d: %v, want %v (limit 2)", i+1, got, want)
		}
	}
	tn.Done()
	if !tn.Start() {
		t.Fatal("refused after a Done")
	}
}

func TestFileReloadKeepsState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tenants:\n  - name: a\n    max_concurrency: 1\n    keys: [" + HashKey("k1") + "]\n")
	f, err := Open(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := f.Lookup("k1")
	if a == nil || !a.Start() {
		t.Fatal("k1 not usable")
	}
	if changed, err := f.Reload(); changed || err != nil {
		t.Fatalf("unchanged file: changed %v err %v", changed, err)
	}
	// Rotate the key and raise the limit: the request in flight stays
	// counted for the tenant of the same name.
	write("tenants:\n  - name: a\n    max_concurrency: 2\n    keys: [" + HashKey("k2") + "]\n")
	if changed, err := f.Reload(); !changed || err != nil {
		t.Fatalf("changed file: changed %v err %v", changed, err)
	}
	if f.Lookup("k1") != nil {
		t.Fatal("the old key still works")
	}
	a2 := f.Lookup("k2")
	if a2 == nil || a2.InFlight() != 1 || !a2.Start() || a2.Start() {
		t.Fatalf("after reload: %+v in flight %d", a2, a2.InFlight())
	}
	// A broken file keeps the last good set.
	write("tenants: [")
	if changed, err := f.Reload(); changed || !errors.Is(err, ErrInvalid) {
		t.Fatalf("broken file: changed %v err %v", changed, err)
	}
	if f.Lookup("k2") == nil {
		t.Fatal("the last good set was dropped")
	}
}
