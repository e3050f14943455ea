package console

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// maxEntries bounds the snapshots the console keeps (an hour of one
// snapshot every half second).
const maxEntries = 7200

// history caches the audit stream's snapshots of the last cfg.History,
// read incrementally: each refresh reads only what was stored since the
// previous one.
type history struct {
	mu      sync.Mutex
	entries []snapEntry // oldest first
	lastSeq uint64
	invalid int
	readAt  time.Time
}

// snapEntry is one whole snapshot of the audit stream.
type snapEntry struct {
	Seq    uint64
	Stored time.Time
	Snap   *schemas.WeightSnapshot
}

// refreshEvery is how often page loads read the audit stream again.
const refreshEvery = 500 * time.Millisecond

// snapshots returns the snapshots of the history window, oldest first,
// after reading any new ones. The returned slice is not modified later.
func (c *Console) snapshots(ctx context.Context) ([]snapEntry, error) {
	h := c.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	now := c.cfg.Now()
	since := now.Add(-c.cfg.History)
	if h.readAt.IsZero() || now.Sub(h.readAt) >= refreshEvery || now.Before(h.readAt) {
		from := snapshots.AuditFrom{Time: since}
		if h.lastSeq > 0 {
			from = snapshots.AuditFrom{Seq: h.lastSeq + 1}
		}
		var added []snapEntry
		err := c.cfg.Snapshots.ReadAudit(ctx, from, func(e snapshots.AuditEntry) bool {
			h.lastSeq = max(h.lastSeq, e.Seq)
			if e.Err != nil {
				h.invalid++
				c.log.Warn("skipping audit message", "seq", e.Seq, "err", e.Err)
				return true
			}
			added = append(added, snapEntry{Seq: e.Seq, Stored: e.Stored, Snap: e.Snapshot})
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("reading the snapshot audit stream: %w", err)
		}
		h.readAt = now
		// Copy on change, so slices handed out earlier stay as they were.
		keep := 0
		for keep < len(h.entries) && h.entries[keep].Stored.Before(since) {
			keep++
		}
		if len(added) > 0 || keep > 0 {
			all := make([]snapEntry, 0, len(h.entries)-keep+len(added))
			all = append(all, h.entries[keep:]...)
			all = append(all, added...)
			if len(all) > maxEntries {
				all = all[len(all)-maxEntries:]
			}
			h.entries = all
		}
	}
	return h.entries, nil
}

// latest returns the newest snapshot, nil when there is none.
func latest(es []snapEntry) *schemas.WeightSnapshot {
	if len(es) == 0 {
		return nil
	}
	return es[len(es)-1].Snap
}

// byVersion finds the snapshot of version v in es, or reads the audit
// stream around v's time (a version is its window's end in Unix ms, so
// it was stored soon after it).
func (c *Console) byVersion(ctx context.Context, es []snapEntry, v uint64) (*schemas.WeightSnapshot, error) {
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Snap.GetVersion() == v {
			return es[i].Snap, nil
		}
	}
	var found *schemas.WeightSnapshot
	from := time.UnixMilli(int64(v)).Add(-time.Minute)
	scanned := 0
	err := c.cfg.Snapshots.ReadAudit(ctx, snapshots.AuditFrom{Time: from}, func(e snapshots.AuditEntry) bool {
		scanned++
		if e.Snapshot != nil && e.Snapshot.GetVersion() == v {
			found = e.Snapshot
			return false
		}
		return scanned < 10_000 && (e.Snapshot == nil || e.Snapshot.GetVersion() < v)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot audit stream: %w", err)
	}
	if found == nil {
		return nil, fmt.Errorf("no snapshot version %d in the audit stream", v)
	}
	return found, nil
}

// findCluster returns snap's weights of cluster, nil when it has none.
func findCluster(snap *schemas.WeightSnapshot, cluster string) *schemas.ClusterWeights {
	for _, cw := range snap.GetClusters() {
		if cw.GetCluster() == cluster {
			return cw
		}
	}
	return nil
}
