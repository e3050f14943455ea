package snapshots_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// readerPermissions are what explain and console need (docs/security.md):
// read the bucket and the audit stream, create nothing.
var readerPermissions = &server.Permissions{
	Publish: &server.SubjectPermission{Allow: []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO.KV_switchyard_snapshots",
		"$JS.API.CONSUMER.CREATE.KV_switchyard_snapshots.>", "$JS.API.CONSUMER.DELETE.KV_switchyard_snapshots.>",
		"$JS.API.DIRECT.GET.KV_switchyard_snapshots.>", "$JS.API.STREAM.MSG.GET.KV_switchyard_snapshots",
		"$JS.FC.KV_switchyard_snapshots.>",
		"$JS.API.STREAM.INFO.SWITCHYARD_SNAPSHOT_AUDIT",
		"$JS.API.CONSUMER.CREATE.SWITCHYARD_SNAPSHOT_AUDIT.>", "$JS.API.CONSUMER.DELETE.SWITCHYARD_SNAPSHOT_AUDIT.>",
		"$JS.API.CONSUMER.INFO.SWITCHYARD_SNAPSHOT_AUDIT.>",
		"$JS.API.CONSUMER.MSG.NEXT.SWITCHYARD_SNAPSHOT_AUDIT.>",
	}},
	Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
}

// TestLookupReadOnly: a user who may only read the bucket and the audit
// stream cannot Open the store (it creates or updates them) but can
// Lookup it and read every snapshot; Lookup of a missing bucket is
// ErrNoBucket, and creates nothing.
func TestLookupReadOnly(t *testing.T) {
	ns := testenv.NATSWith(t, server.Options{Users: []*server.User{
		{Username: "optimizer", Password: "o"},
		{Username: "reader", Password: "r", Permissions: readerPermissions},
	}})
	connect := func(user, pass string) jetstream.JetStream {
		return testenv.JetStream(t, ns, nats.UserInfo(user, pass),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // the refusals are expected
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	reader := connect("reader", "r")

	if _, err := snapshots.Lookup(ctx, reader); !errors.Is(err, snapshots.ErrNoBucket) {
		t.Fatalf("Lookup before the optimizer created the bucket: %v, want ErrNoBucket", err)
	}
	writer, err := snapshots.Open(ctx, connect("optimizer", "o"))
	if err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v <= 2; v++ {
		if err := writer.Publish(ctx, snap(v, "region-a")); err != nil {
			t.Fatal(err)
		}
	}
	// A refused request goes unanswered: short deadlines.
	openCtx, openCancel := context.WithTimeout(ctx, time.Second)
	_, err = snapshots.Open(openCtx, reader)
	openCancel()
	if err == nil {
		t.Fatal("a read-only user opened the store with create-or-update")
	}
	st, err := snapshots.Lookup(ctx, reader)
	if err != nil {
		t.Fatalf("Lookup as the read-only user: %v", err)
	}
	if got, err := st.Get(ctx, "region-a"); err != nil || got.GetVersion() != 2 {
		t.Fatalf("Get = %v, %v; want version 2", got, err)
	}
	var versions []uint64
	if err := st.ReadAudit(ctx, snapshots.AuditFrom{}, func(e snapshots.AuditEntry) bool {
		versions = append(versions, e.Snapshot.GetVersion())
		return true
	}); err != nil {
		t.Fatalf("ReadAudit as the read-only user: %v", err)
	}
	if len(versions) != 2 {
		t.Errorf("audit versions %v, want 1 and 2", versions)
	}
	pubCtx, pubCancel := context.WithTimeout(ctx, time.Second)
	defer pubCancel()
	if err := st.Publish(pubCtx, snap(3, "region-a")); err == nil {
		t.Error("a read-only user published a snapshot")
	}
}
