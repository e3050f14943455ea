package brokers

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestNATSMaxPayload: the embedded NATS server announces
// DefaultNATSMaxPayload (16 MiB, room for a 12 MB audit snapshot) unless
// Config.NATSMaxPayload says otherwise, and a 12 MB message goes through
// with the default.
func TestNATSMaxPayload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, tc := range []struct {
		set  int32
		want int64
	}{{0, DefaultNATSMaxPayload}, {2 << 20, 2 << 20}} {
		b, err := Start(ctx, Config{NATSMaxPayload: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(b.NATSURL())
		if err != nil {
			b.Close()
			t.Fatal(err)
		}
		if got := nc.MaxPayload(); got != tc.want {
			t.Errorf("NATSMaxPayload %d: the server announces %d, want %d", tc.set, got, tc.want)
		}
		if tc.set == 0 {
			sub, err := nc.SubscribeSync("big")
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish("big", make([]byte, 12<<20)); err != nil {
				t.Errorf("publishing 12 MiB: %v", err)
			} else if m, err := sub.NextMsg(10 * time.Second); err != nil || len(m.Data) != 12<<20 {
				t.Errorf("receiving 12 MiB: %v", err)
			}
		}
		nc.Close()
		b.Close()
	}
	if _, err := Start(ctx, Config{NATSMaxPayload: -1}); err == nil {
		t.Error("NATSMaxPayload -1: no error")
	}
}
