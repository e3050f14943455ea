package main

import (
	"testing"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/policy"
)

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		a, b   float64
		higher bool
		want   int
	}{
		{100, 101, false, 0},   // within 2%: tie
		{100, 103, false, 1},   // lower latency wins
		{103, 100, false, -1},  // higher latency loses
		{0.50, 0.52, true, -1}, // 3.8% lower hit rate loses
		{0.52, 0.50, true, 1},
		{0, 0, true, 0},
	} {
		if got := outcome(tc.a, tc.b, tc.higher); got != tc.want {
			t.Errorf("outcome(%v, %v, higher %v) = %d, want %d", tc.a, tc.b, tc.higher, got, tc.want)
		}
	}
}

func metricsOf(p99, goodput, kv float64) des.Metrics {
	return des.Metrics{TTFTms: des.Percentiles{P99: p99}, GoodputRPS: goodput, KVHitRate: kv}
}

// A cell's goals compare switchyard with the best baseline on each metric
// (the best prefix-aware one for KV), and the matrix counts each baseline.
func TestScore(t *testing.T) {
	pols := map[string]des.Metrics{}
	for _, n := range policy.Names() {
		pols[n] = metricsOf(1000, 10, 0.1)
	}
	pols["switchyard"] = metricsOf(210, 50, 0.76)
	pols["chwbl"] = metricsOf(200, 50.5, 0.70)
	pols["llmd-scorer"] = metricsOf(300, 49, 0.80)
	r := score([]*cell{{Scenario: "x", Seed: 1, Policies: pols}})
	c := r.cells[0]
	if c.bestP99By != "chwbl" || c.p99OK || c.p99Ratio != 1.05 {
		t.Errorf("p99: best %s, ok %v, ratio %v; want chwbl, not ok (5%% worse), 1.05", c.bestP99By, c.p99OK, c.p99Ratio)
	}
	if !c.goodputOK || c.bestGoodput != 50.5 {
		t.Errorf("goodput: ok %v, best %v; want ok (1%% below 50.5)", c.goodputOK, c.bestGoodput)
	}
	if c.bestKVBy != "llmd-scorer" || !c.kvOK {
		t.Errorf("KV: best %s, ok %v; want llmd-scorer, ok (0.95 x 0.80 = 0.76)", c.bestKVBy, c.kvOK)
	}
	if got := r.vs["chwbl"][0]; got != (wtl{loss: 1}) {
		t.Errorf("p99 against chwbl: %v, want a loss", got)
	}
	if got := r.vs["chwbl"][1]; got != (wtl{tie: 1}) {
		t.Errorf("goodput against chwbl: %v, want a tie", got)
	}
	if got := r.vs["round-robin"][2]; got != (wtl{win: 1}) {
		t.Errorf("KV against round-robin: %v, want a win", got)
	}
	g := r.goals()
	if g.n != 1 || g.p99OK != 0 || g.goodputOK != 1 || g.kvOK != 1 || g.worstP99 != 1.05 {
		t.Errorf("goals %+v", g)
	}
}
