// Package brokers starts the embedded message brokers Switchyard uses when
// no external cluster is given: a real NATS server with JetStream
// (nats-server/v2) and an in-process Kafka that speaks the wire protocol
// (franz-go's kfake). Both listen on real TCP ports, so outside clients
// (kcat, the nats CLI) work against them, and both persist to disk when
// given a data directory.
package brokers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Config says where the brokers listen and where they keep data.
type Config struct {
	// KafkaListen is the host:port of the embedded Kafka broker.
	// Default "127.0.0.1:0" (a free port).
	KafkaListen string
	// NATSListen is the host:port of the embedded NATS server.
	// Default "127.0.0.1:0" (a free port).
	NATSListen string
	// DataDir, when set, makes both brokers persist under it
	// (DataDir/kafka and DataDir/jetstream). Empty: Kafka in memory,
	// JetStream in a temporary directory removed by Close.
	DataDir string
	// KafkaPartitions is the default partition count of auto-created
	// topics. Default 3.
	KafkaPartitions int
	// NATSMaxPayload is the largest message NATS accepts, in bytes.
	// Default DefaultNATSMaxPayload; 0 means the default.
	NATSMaxPayload int32
	// Security makes both brokers require TLS and credentials. The zero
	// value leaves them open (plain TCP, no authentication): only for
	// loopback.
	Security Security
}

// Security is what the embedded brokers require of clients.
type Security struct {
	// TLS is the servers' TLS configuration (Certificates; ClientCAs and
	// ClientAuth tls.RequireAndVerifyClientCert for mutual TLS). nil:
	// plain TCP.
	TLS *tls.Config
	// Users may connect to both brokers with a password: to NATS as users
	// (all subjects unless NATSPermissions is set) and to Kafka by SASL
	// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Users []User
	// NATSNKeys are nkey user public keys (U...) NATS also accepts.
	NATSNKeys []string
	// NATSToken, when set and there are no Users or NKeys, is the token
	// NATS requires.
	NATSToken string
}

// User is a broker user.
type User struct {
	Name, Password string
	// NATSPermissions restricts what the user may publish and subscribe
	// to on NATS (nil: everything). See docs/security.md.
	NATSPermissions *server.Permissions
	// KafkaACLs restrict the user on Kafka; with none the user is a
	// superuser. ACLs are only enforced when some user has them.
	KafkaACLs []kfake.ACL
}

// authOn reports whether any credential is required.
func (s Security) authOn() bool {
	return len(s.Users) > 0 || len(s.NATSNKeys) > 0 || s.NATSToken != ""
}

// Brokers is a running pair of embedded brokers.
type Brokers struct {
	NATS  *server.Server
	Kafka *kfake.Cluster
	tmp   string // JetStream's temporary store, removed by Close
}

// Start starts both brokers and waits until they accept connections.
func Start(ctx context.Context, cfg Config) (*Brokers, error) {
	store, tmp := dataSub(cfg.DataDir, "jetstream"), ""
	if store == "" {
		d, err := os.MkdirTemp("", "switchyard-jetstream-")
		if err != nil {
			return nil, fmt.Errorf("jetstream store: %w", err)
		}
		store, tmp = d, d
	}
	ns, err := startNATS(ctx, cfg.NATSListen, store, cfg.NATSMaxPayload, cfg.Security)
	if err != nil {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
		return nil, err
	}
	kc, err := startKafka(cfg.KafkaListen, dataSub(cfg.DataDir, "kafka"), cfg.KafkaPartitions, cfg.Security)
	if err != nil {
		ns.Shutdown()
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
		return nil, err
	}
	return &Brokers{NATS: ns, Kafka: kc, tmp: tmp}, nil
}

func dataSub(dir, sub string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, sub)
}

// KafkaAddrs returns the bootstrap addresses of the Kafka broker.
func (b *Brokers) KafkaAddrs() []string { return b.Kafka.ListenAddrs() }

// NATSURL returns the client URL of the NATS server.
func (b *Brokers) NATSURL() string { return b.NATS.ClientURL() }

// Close stops both brokers.
func (b *Brokers) Close() {
	b.Kafka.Close()
	b.NATS.Shutdown()
	b.NATS.WaitForShutdown()
	if b.tmp != "" {
		_ = os.RemoveAll(b.tmp)
	}
}

func splitHostPort(addr, def string) (string, int, error) {
	if addr == "" {
		addr = def
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("parsing listen address %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("parsing port of %q: invalid port", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return host, p, nil
}

// DefaultNATSMaxPayload is the embedded NATS server's max_payload: 16
// MiB, against NATS's own 1 MiB, because a snapshot of 20,000 engines is
// about 2 MB and the audit message of 100 clusters of 20,000 engines about
// 12 MB (docs/deploy.md#clustered-brokers). The compose and Kubernetes
// NATS configurations set the same.
const DefaultNATSMaxPayload = 16 << 20

// StartNATS starts a NATS server with JetStream on listen (host:port; port
// 0 picks a free one) and DefaultNATSMaxPayload. storeDir empty keeps
// JetStream in a temporary directory of the server's choosing, shared
// between runs: Start gives each run its own.
func StartNATS(ctx context.Context, listen, storeDir string) (*server.Server, error) {
	return startNATS(ctx, listen, storeDir, 0, Security{})
}

func startNATS(ctx context.Context, listen, storeDir string, maxPayload int32, sec Security) (*server.Server, error) {
	if maxPayload < 0 {
		return nil, fmt.Errorf("nats max payload %d: must not be negative", maxPayload)
	}
	if maxPayload == 0 {
		maxPayload = DefaultNATSMaxPayload
	}
	host, port, err := splitHostPort(listen, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		Host:      host,
		Port:      port,
		JetStream: true,
		StoreDir:  storeDir,
		NoLog:     true,
		NoSigs:    true,
		// One-process dev server: keep JetStream's reservations small.
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  1 << 30,
		MaxPayload:         maxPayload,
		// A client may have a whole snapshot pending, and then some.
		MaxPending: max(int64(maxPayload)*4, server.MAX_PENDING_SIZE),
	}
	natsSecurity(opts, sec)
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("creating nats server: %w", err)
	}
	go ns.Start()
	deadline := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		deadline = time.Until(d)
	}
	if !ns.ReadyForConnections(deadline) {
		ns.Shutdown()
		return nil, errors.New("nats server not ready for connections")
	}
	return ns, nil
}

// StartKafka starts a single-broker kfake cluster on listen (host:port;
// port 0 picks a free one). dataDir empty keeps the log in memory.
func StartKafka(listen, dataDir string, partitions int) (*kfake.Cluster, error) {
	return startKafka(listen, dataDir, partitions, Security{})
}

func startKafka(listen, dataDir string, partitions int, sec Security) (*kfake.Cluster, error) {
	host, port, err := splitHostPort(listen, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if partitions <= 0 {
		partitions = 3
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
		kfake.ClusterID("switchyard-embedded"),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
	}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir))
	}
	opts = append(opts, kafkaSecurity(sec)...)
	kc, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting embedded kafka on %s:%d: %w", host, port, err)
	}
	return kc, nil
}
