package console

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// timelineEvent is one thing that happened to the fleet or the pipeline,
// as the console can tell from the estimates, the snapshots and the
// dead-letter topic.
type timelineEvent struct {
	Ms int64
	// Kind: "health", "capacity", "estimates", "snapshots", "shed" or
	// "dead letters".
	Kind string
	// Engine or Cluster names the subject ("" for the pipeline).
	Engine, Cluster string
	Text            string
	// Status is "ok", "warn" or "bad" (the health grid's classes).
	Status string
}

// Thresholds of the timeline.
const (
	// capacityJump is the relative change of an engine's capacity between
	// consecutive windows worth an event.
	capacityJump = 0.25
	// gapFactor: a gap between consecutive snapshots (or an engine's
	// estimates) of more than gapFactor × the median interval, and at
	// least minGapMs, is an event.
	gapFactor = 3
	minGapMs  = 5_000
	// maxTimeline bounds the events a page shows (the newest).
	maxTimeline = 200
)

// timeline builds the events of (from, to] in Unix ms (to 0: no upper
// bound), newest first, at most maxTimeline.
func timeline(es []snapEntry, hist map[string][]*schemas.EngineEstimate, dls []deadLetter, from, to int64) []timelineEvent {
	var out []timelineEvent
	ids := make([]string, 0, len(hist))
	for id := range hist {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		out = append(out, engineEvents(id, hist[id])...)
	}
	out = append(out, snapshotEvents(es)...)
	out = append(out, deadLetterEvents(dls)...)
	kept := out[:0]
	for _, e := range out {
		if e.Ms > from && (to == 0 || e.Ms <= to) {
			kept = append(kept, e)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].Ms > kept[j].Ms })
	if len(kept) > maxTimeline {
		kept = kept[:maxTimeline]
	}
	return kept
}

// engineEvents are one engine's health changes, capacity jumps and gaps
// in its estimates (hist sorted by window end).
func engineEvents(id string, hist []*schemas.EngineEstimate) []timelineEvent {
	var out []timelineEvent
	ends := make([]int64, len(hist))
	for i, e := range hist {
		ends[i] = e.GetWindowEndUnixMs()
	}
	gap := gapBound(ends)
	for i := 1; i < len(hist); i++ {
		a, b := hist[i-1], hist[i]
		at := b.GetWindowEndUnixMs()
		if d := at - a.GetWindowEndUnixMs(); gap > 0 && d > gap {
			out = append(out, timelineEvent{Ms: at, Kind: "estimates", Engine: id, Status: "warn",
				Text: fmt.Sprintf("no estimate for %s (windows %s to %s): the engine's signals stopped or the processor lagged", fmtAge(msDur(d)), unixMs(a.GetWindowEndUnixMs()), unixMs(at))})
		}
		if a.GetHealth() != b.GetHealth() {
			st := "warn"
			if b.GetHealth() == schemas.Health_HEALTH_HEALTHY {
				st = "ok"
			} else if b.GetHealth() == schemas.Health_HEALTH_UNHEALTHY {
				st = "bad"
			}
			out = append(out, timelineEvent{Ms: at, Kind: "health", Engine: id, Status: st,
				Text: fmt.Sprintf("health %s → %s", healthName(a.GetHealth()), healthName(b.GetHealth()))})
		}
		ca, cb := a.GetCapacityRps(), b.GetCapacityRps()
		if scale := math.Max(ca, cb); scale > 0 && math.Abs(cb-ca) >= capacityJump*scale {
			out = append(out, timelineEvent{Ms: at, Kind: "capacity", Engine: id, Status: "warn",
				Text: fmt.Sprintf("capacity %.2f → %.2f rps (%s, %d ready replicas)", ca, cb, orDash(b.GetCapacitySource()), b.GetReadyReplicas())})
		}
	}
	return out
}

// snapshotEvents are gaps in the snapshot history (the optimizer or NATS
// was down, or nothing was planned) and clusters starting or stopping to
// shed.
func snapshotEvents(es []snapEntry) []timelineEvent {
	var out []timelineEvent
	vs := make([]int64, len(es))
	for i, e := range es {
		vs[i] = int64(e.Snap.GetVersion())
	}
	gap := gapBound(vs)
	shedding := map[string]bool{}
	for i, e := range es {
		v := vs[i]
		if i > 0 && gap > 0 && v-vs[i-1] > gap {
			out = append(out, timelineEvent{Ms: v, Kind: "snapshots", Status: "bad",
				Text: fmt.Sprintf("no snapshot for %s (v%d at %s to v%d): the optimizer, its inputs or NATS were down", fmtAge(msDur(v-vs[i-1])), vs[i-1], unixMs(vs[i-1]), v)})
		}
		for _, cw := range e.Snap.GetClusters() {
			id, s := cw.GetCluster(), cw.GetShedFraction() > 0
			if s == shedding[id] {
				continue
			}
			shedding[id] = s
			if s {
				out = append(out, timelineEvent{Ms: v, Kind: "shed", Cluster: id, Status: "bad",
					Text: fmt.Sprintf("v%d sheds %.1f%% of %.2f rps: demand above capacity", v, 100*cw.GetShedFraction(), cw.GetDemandRps())})
			} else if i > 0 {
				out = append(out, timelineEvent{Ms: v, Kind: "shed", Cluster: id, Status: "ok", Text: fmt.Sprintf("v%d sheds nothing", v)})
			}
		}
	}
	return out
}

// deadLetterEvents groups dead letters by 10 s bucket, reason and source
// topic.
func deadLetterEvents(dls []deadLetter) []timelineEvent {
	type key struct {
		bucket         int64
		reason, origin string
	}
	n := map[key]int{}
	var order []key
	for _, d := range dls {
		k := key{d.ms / bucketMs, d.reason, d.origin}
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	out := make([]timelineEvent, 0, len(order))
	for _, k := range order {
		out = append(out, timelineEvent{Ms: (k.bucket + 1) * bucketMs, Kind: "dead letters", Status: "warn",
			Text: fmt.Sprintf("%d record(s) of %s dead-lettered: %s", n[k], orDash(k.origin), orDash(k.reason))})
	}
	return out
}

// gapBound is gapFactor × the median interval of the sorted times ts,
// and at least minGapMs (0 with fewer than three times).
func gapBound(ts []int64) int64 {
	if len(ts) < 3 {
		return 0
	}
	d := make([]int64, 0, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		if dt := ts[i] - ts[i-1]; dt > 0 {
			d = append(d, dt)
		}
	}
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return max(gapFactor*d[len(d)/2], minGapMs)
}

func msDur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
