package brokers

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// TestNATSTokenAndNKey: NATS started with a token accepts exactly that
// token; started with an nkey user accepts a client holding the seed
// (--nats-nkey-seed) and refuses one without.
func TestNATSTokenAndNKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		sec       Security
		good, bad map[string]string
	}{
		{"token", Security{NATSToken: "t0ken"},
			map[string]string{"SWITCHYARD_NATS_TOKEN": "t0ken"}, map[string]string{"SWITCHYARD_NATS_TOKEN": "guess"}},
		{"nkey", Security{NATSNKeys: []string{pub}},
			map[string]string{"SWITCHYARD_NATS_NKEY_SEED": seedFile}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, err := startNATS(ctx, "127.0.0.1:0", t.TempDir(), 0, tc.sec)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
			with := func(env map[string]string) map[string]string {
				out := map[string]string{"SWITCHYARD_NATS_URL": ns.ClientURL()}
				for k, v := range env {
					out[k] = v
				}
				return out
			}
			nc, err := connection(t, with(tc.good)).ConnectNATS()
			if err != nil {
				t.Fatalf("good credentials refused: %v", err)
			}
			nc.Close()
			if nc, err := connection(t, with(tc.bad)).ConnectNATS(); err == nil {
				nc.Close()
				t.Fatal("bad credentials accepted")
			}
		})
	}
}
