package snapshots_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

func TestReadAuditDeliversEverySnapshotFromAPosition(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	read := func(from snapshots.AuditFrom, stopAfter int) []uint64 {
		t.Helper()
		var vs []uint64
		err := st.ReadAudit(ctx, from, func(e snapshots.AuditEntry) bool {
			if e.Err != nil {
				t.Fatalf("entry %d: %v", e.Seq, e.Err)
			}
			vs = append(vs, e.Snapshot.GetVersion())
			return stopAfter == 0 || len(vs) < stopAfter
		})
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	if got := read(snapshots.AuditFrom{}, 0); len(got) != 0 {
		t.Fatalf("empty stream delivered %v", got)
	}
	// More than one fetch batch (256).
	const n = 300
	for v := uint64(1); v <= n; v++ {
		if err := st.Publish(ctx, snap(v, "region-a")); err != nil {
			t.Fatal(err)
		}
	}
	all := read(snapshots.AuditFrom{}, 0)
	if len(all) != n || all[0] != 1 || all[n-1] != n {
		t.Fatalf("read %d snapshots (first %v), want versions 1..%d", len(all), all[:min(3, len(all))], n)
	}
	if got := read(snapshots.AuditFrom{Seq: 290}, 0); len(got) != 11 || got[0] != 290 {
		t.Fatalf("from seq 290: %v", got)
	}
	if got := read(snapshots.AuditFrom{Seq: n + 1}, 0); len(got) != 0 {
		t.Fatalf("from past the end: %v", got)
	}
	if got := read(snapshots.AuditFrom{}, 5); len(got) != 5 {
		t.Fatalf("fn returning false after 5 delivered %d", len(got))
	}
	if got := read(snapshots.AuditFrom{Time: time.Now().Add(time.Hour)}, 0); len(got) != 0 {
		t.Fatalf("from the future: %v", got)
	}
	if got := read(snapshots.AuditFrom{Time: time.Now().Add(-time.Hour)}, 0); len(got) != n {
		t.Fatalf("from an hour ago: %d snapshots, want %d", len(got), n)
	}
}
