package estimate

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// chunkPane is a pane with 300 engines, 5 clusters of 200 network
// accumulators each and attempt counts.
func chunkPane() *Pane {
	p := NewPane()
	for i := range 300 {
		id := fmt.Sprintf("r%03d-h100-%04d", i%7, i)
		e := &Engine{lastMs: int64(i), gpuClass: "h100", region: "r1", signals: uint32(i), running: float64(i) / 3}
		e.ttft[i%numBins] = bin{w: 1, wu: 0.25, wl: float64(i)}
		p.engines[id] = e
		p.tries[id] = &Tries{attempts: uint32(i), failures: uint32(i % 3)}
	}
	for c := range 5 {
		cp := &clusterPane{demand: Demand{requests: uint32(c + 1), tokened: 3, promptSum: 1.5}, network: map[string]*Network{}}
		for i := range 200 {
			cp.network[fmt.Sprintf("r%03d-h100-%04d", i%7, i)] = &Network{rttSum: int64(i) << 20, rttN: 1, unsized: uint32(c)}
		}
		p.clusters[fmt.Sprintf("c%d", c)] = cp
		p.networks += len(cp.network)
	}
	return p
}

// TestPanePartsJoin: the parts of a pane, decoded and joined, encode to
// the pane's own bytes, at every part size (down to one accumulator
// each), and no part is larger than asked unless it holds a single
// accumulator.
func TestPanePartsJoin(t *testing.T) {
	p := chunkPane()
	want := AppendPane(nil, p)
	for _, maxBytes := range []int{1, 100, 2_000, 60_000, 1 << 30} {
		t.Run(fmt.Sprint(maxBytes), func(t *testing.T) {
			parts := PaneParts(p, maxBytes)
			got := NewPane()
			for i, b := range parts {
				if len(b) > maxBytes && maxBytes >= 2_000 {
					t.Errorf("part %d: %d bytes, asked at most %d", i, len(b), maxBytes)
				}
				q, err := DecodePane(b)
				if err != nil {
					t.Fatalf("part %d: %v", i, err)
				}
				if err := got.Join(q); err != nil {
					t.Fatalf("part %d: %v", i, err)
				}
			}
			if !bytes.Equal(AppendPane(nil, got), want) {
				t.Fatalf("%d parts joined differ from the pane", len(parts))
			}
			if maxBytes == 1<<30 && (len(parts) != 1 || !bytes.Equal(parts[0], want)) {
				t.Error("a pane under the limit is not one part equal to AppendPane")
			}
			t.Logf("%d parts", len(parts))
		})
	}
	if parts := PaneParts(NewPane(), 100); len(parts) != 1 || !bytes.Equal(parts[0], AppendPane(nil, NewPane())) {
		t.Error("an empty pane is not one empty part")
	}
}

// TestJoinRejectsOverlap: parts that share an accumulator (not cut from
// one pane) are an error and leave the pane as it was.
func TestJoinRejectsOverlap(t *testing.T) {
	one := func() *Pane {
		q, err := DecodePane(AppendPane(nil, chunkPane()))
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	only := func(keep func(p *Pane)) *Pane {
		p := one()
		keep(p)
		return p
	}
	for name, o := range map[string]*Pane{
		"engine": only(func(p *Pane) { p.clusters, p.tries, p.networks = map[string]*clusterPane{}, map[string]*Tries{}, 0 }),
		"demand": only(func(p *Pane) { p.engines, p.tries = map[string]*Engine{}, map[string]*Tries{} }),
		"network": only(func(p *Pane) {
			p.engines, p.tries = map[string]*Engine{}, map[string]*Tries{}
			for _, c := range p.clusters {
				c.demand = Demand{}
			}
		}),
		"tries": only(func(p *Pane) { p.engines, p.clusters, p.networks = map[string]*Engine{}, map[string]*clusterPane{}, 0 }),
	} {
		t.Run(name, func(t *testing.T) {
			p := one()
			before := AppendPane(nil, p)
			if err := p.Join(o); !errors.Is(err, ErrPaneEncoding) {
				t.Fatalf("joined an overlapping part: %v", err)
			}
			if !bytes.Equal(AppendPane(nil, p), before) {
				t.Error("a rejected part changed the pane")
			}
		})
	}
}
