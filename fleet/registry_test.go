package fleet

import (
	"errors"
	"os"
	"testing"
)

func TestLoad(t *testing.T) {
	r, err := Load("testdata/registry.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := r.Lookup("h100-a"); !ok || e.URL != "http://10.0.0.5:8000" || e.MaxBatch != 256 || e.MaxReplicas != 2 || e.GPUClass != "h100" {
		t.Fatalf("h100-a: %+v %v", e, ok)
	}
	if r.Len() != 2 || len(r.Engines()) != 2 {
		t.Fatalf("%d engines", r.Len())
	}
	if _, err := Load("testdata/registry.good.json"); err != nil {
		t.Fatalf("json: %v", err)
	}
	if _, err := Load("testdata/missing.yaml"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":         "engines: []",
		"no id":         "engines: [{url: 'http://a'}]",
		"duplicate":     "engines: [{id: a, url: 'http://a'}, {id: a, url: 'http://b'}]",
		"unknown field": "engines: [{id: a, url: 'http://a', weight: 1}]",
		"not http":      "engines: [{id: a, url: 'ftp://a'}]",
		"no host":       "engines: [{id: a, url: 'http://'}]",
		"user info":     "engines: [{id: a, url: 'http://u:p@a'}]",
		"query":         "engines: [{id: a, url: 'http://a/?x=1'}]",
		"not yaml":      "engines: [",
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheck(t *testing.T) {
	r, err := New(Engine{ID: "e1", URL: "http://E1:8000/"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id, url, reason string
	}{
		{"e1", "http://e1:8000", ""},
		{"e1", "HTTP://e1:8000/", ""},
		{"e1", "", ""},
		{"e9", "http://e1:8000", "unregistered_engine"},
		{"e1", "http://evil:8000", "endpoint_mismatch"},
		{"e1", "http://e1:8000/v2", "endpoint_mismatch"},
	} {
		if got := Reason(r.Check(c.id, c.url)); got != c.reason {
			t.Errorf("Check(%q, %q): %q, want %q", c.id, c.url, got, c.reason)
		}
	}
	var none *Registry
	if err := none.Check("e9", "http://anything"); err != nil {
		t.Errorf("no registry: %v", err)
	}
}
