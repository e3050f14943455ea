package brokers

import (
	"context"
	"errors"
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/services/brokers/roles"
)

// TestRoleUsers: each --<role>-password (or SWITCHYARD_<ROLE>_PASSWORD)
// makes one user named after the role holding exactly that role's NATS
// permissions and Kafka ACLs (roles.TestLeastPrivilege shows each doing
// its job and being refused the rest); a role without a password has no
// user.
func TestRoleUsers(t *testing.T) {
	fs := flag.NewFlagSet("brokers", flag.ContinueOnError)
	var sf securityFlags
	sf.register(fs)
	env := map[string]string{"SWITCHYARD_GATEWAY_PASSWORD": "g", "SWITCHYARD_READER_PASSWORD": "r"}
	if err := cli.Parse(fs, []string{"--optimizer-password=o", "--agent-password=a"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	sf.prefix = "switchyard"
	sec, err := sf.security()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range sec.Users {
		names = append(names, u.Name)
		want := roles.Role(u.Name).User(u.Password, "switchyard", "switchyard-processor")
		if len(u.KafkaACLs) == 0 || !slices.Equal(u.KafkaACLs, want.KafkaACLs) || u.NATSPermissions == nil {
			t.Errorf("user %s: %d ACLs, want the role's %d", u.Name, len(u.KafkaACLs), len(want.KafkaACLs))
		}
	}
	if !slices.Equal(names, []string{"agent", "optimizer", "gateway", "reader"}) {
		t.Fatalf("users %v", names)
	}
}

// TestOpenRefusedOffLoopback: brokers listening beyond loopback without
// any credential refuse to start unless --allow-open says so.
func TestOpenRefusedOffLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := run(ctx, []string{"--kafka-listen=0.0.0.0:0", "--nats-listen=127.0.0.1:0"}, io.Discard, io.Discard)
	if !errors.Is(err, cli.ErrUsage) {
		t.Fatalf("open on 0.0.0.0: %v, want a usage error", err)
	}
	for _, addr := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1"} {
		if !loopback(addr) {
			t.Errorf("%s: not loopback", addr)
		}
	}
	for _, addr := range []string{"0.0.0.0:1", ":1", "10.0.0.1:1", "kafka:9092"} {
		if loopback(addr) {
			t.Errorf("%s: loopback", addr)
		}
	}
}
