package engine

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestLoRASlotsBoundAdaptersInTheBatch: with 2 adapter slots, requests of
// three adapters arriving together never run with more than two adapters
// at once; the third adapter's request waits while a base-model request
// queued behind it starts with the second's (it is skipped, as vLLM's scheduler
// does), and it starts only when an adapter's last request ends. Each
// distinct adapter costs one load, and a load lengthens its step.
func TestLoRASlotsBoundAdaptersInTheBatch(t *testing.T) {
	e := newEngine(t, "h100", func(c *Config) { c.MaxLoRAs = 2; c.LoRALoad = 40 * time.Millisecond })
	arr := []arrival{
		{0, Request{ID: 1, PromptTokens: 64, OutputTokens: 200, Adapter: 1}},
		{0, Request{ID: 2, PromptTokens: 64, OutputTokens: 20, Adapter: 2}},
		{0, Request{ID: 3, PromptTokens: 64, OutputTokens: 20, Adapter: 3}},
		{0, Request{ID: 4, PromptTokens: 64, OutputTokens: 20}},
	}
	_, res := drive(t, e, arr)
	if len(res) != 4 {
		t.Fatalf("%d results, want 4", len(res))
	}
	if res[4].Admitted != res[2].Admitted {
		t.Errorf("base-model request admitted at %v, want %v with adapter 2's (it need not wait for an adapter slot)", res[4].Admitted, res[2].Admitted)
	}
	if res[3].Admitted < res[2].Finish {
		t.Errorf("adapter 3 admitted at %v, before adapter 2's request ended (%v): 3 adapters in the batch", res[3].Admitted, res[2].Finish)
	}
	if res[3].Admitted >= res[1].Finish {
		t.Errorf("adapter 3 admitted at %v, after adapter 1 ended (%v): it should take adapter 2's idle slot", res[3].Admitted, res[1].Finish)
	}
	if got := e.Stats().LoRALoads; got != 3 {
		t.Errorf("%d adapter loads, want 3", got)
	}
	if got := e.Stats().LoRARequests; got != 3 {
		t.Errorf("%d adapter requests admitted, want 3 (the base-model request is none)", got)
	}
	plain := newEngine(t, "h100", func(c *Config) { c.MaxLoRAs = 2; c.LoRALoad = 40 * time.Millisecond })
	_, base := drive(t, plain, []arrival{{0, Request{ID: 1, PromptTokens: 64, OutputTokens: 5}}})
	_, lora := drive(t, newEngine(t, "h100", func(c *Config) { c.MaxLoRAs = 2; c.LoRALoad = 40 * time.Millisecond }),
		[]arrival{{0, Request{ID: 1, PromptTokens: 64, OutputTokens: 5, Adapter: 7}}})
	if d := lora[1].TTFT() - base[1].TTFT(); d != 40*time.Millisecond {
		t.Errorf("a cold adapter adds %v to TTFT, want the 40ms load", d)
	}
}

// TestLoRAAdaptersReported: Adapters names the adapters running and
// waiting; Reset unloads them.
func TestLoRAAdaptersReported(t *testing.T) {
	e := newEngine(t, "h100", func(c *Config) { c.MaxLoRAs = 1 })
	for i, a := range []int{5, 5, 9} {
		if err := e.Submit(0, Request{ID: uint64(i + 1), PromptTokens: 64, OutputTokens: 50, Adapter: a}); err != nil {
			t.Fatal(err)
		}
	}
	run, wait := e.Adapters()
	if !slices.Equal(run, []int{5}) || !slices.Equal(wait, []int{5, 9}) {
		t.Errorf("running %v waiting %v, want [5] and [5 9] (the first step took one request)", run, wait)
	}
	e.Reset(time.Millisecond)
	if run, wait := e.Adapters(); len(run)+len(wait) != 0 {
		t.Errorf("after Reset: running %v waiting %v", run, wait)
	}
}

func TestLoRARequestErrors(t *testing.T) {
	e := newEngine(t, "h100", nil)
	if err := e.Submit(0, Request{ID: 1, PromptTokens: 8, OutputTokens: 1, Adapter: 1}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("adapter on an engine without LoRA: %v, want ErrInvalidRequest", err)
	}
	e = newEngine(t, "h100", func(c *Config) { c.MaxLoRAs = 1 })
	for _, a := range []int{-1, maxAdapter + 1} {
		if err := e.Submit(0, Request{ID: 2, PromptTokens: 8, OutputTokens: 1, Adapter: a}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("adapter %d: %v, want ErrInvalidRequest", a, err)
		}
	}
	p, _ := LookupPreset("h100")
	for _, c := range []Config{{Preset: p, MaxLoRAs: -1}, {Preset: p, MaxLoRAs: maxAdapter + 1}, {Preset: p, MaxLoRAs: 1, LoRALoad: -1}} {
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("config %+v: %v, want ErrInvalidConfig", c.MaxLoRAs, err)
		}
	}
}
