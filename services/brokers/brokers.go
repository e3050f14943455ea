// Package brokers is the `switchyard brokers` command: the embedded NATS
// (JetStream on) and embedded Kafka as a standalone process, so the other
// services can run as separate processes on one machine.
package brokers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strings"

	embedded "github.com/switchyard-llm/switchyard/internal/brokers"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/services/brokers/roles"
	"github.com/switchyard-llm/switchyard/streams"
)

// Command returns `switchyard brokers`.
func Command() cli.Command {
	return cli.Command{Name: "brokers", Summary: "run the embedded NATS (JetStream) and Kafka brokers", Run: run}
}

// securityFlags are what the brokers require of clients.
type securityFlags struct {
	cert, key, clientCA  string
	user, password       string
	natsToken, natsNKeys string
	// rolePasswords are the passwords of the role users (roles.Roles
	// order); a role without one has no user.
	rolePasswords []string
	prefix, group string
}

func (s *securityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.cert, "tls-cert", "", "PEM server certificate of both brokers (with --tls-key): clients must use TLS")
	fs.StringVar(&s.key, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&s.clientCA, "tls-client-ca", "", "PEM CAs of client certificates: clients must present one (mutual TLS)")
	fs.StringVar(&s.user, "user", "", "user both brokers require (NATS user/password; Kafka SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512)")
	fs.StringVar(&s.password, "password", "", "password of --user (prefer SWITCHYARD_PASSWORD)")
	fs.StringVar(&s.natsToken, "nats-token", "", "token NATS requires (when no --user or --nats-nkeys; prefer SWITCHYARD_NATS_TOKEN)")
	fs.StringVar(&s.natsNKeys, "nats-nkeys", "", "comma-separated nkey user public keys (U...) NATS accepts")
	s.rolePasswords = make([]string, len(roles.Roles()))
	for i, r := range roles.Roles() {
		fs.StringVar(&s.rolePasswords[i], string(r)+"-password", "",
			fmt.Sprintf("password of the user %q, holding only the %s role's NATS permissions and Kafka ACLs (docs/security.md; prefer SWITCHYARD_%s_PASSWORD)",
				r, r, strings.ToUpper(string(r))))
	}
	fs.StringVar(&s.group, "processor-group", "switchyard-processor", "consumer group the processor user may read")
}

func (s *securityFlags) security() (embedded.Security, error) {
	var sec embedded.Security
	if (s.cert == "") != (s.key == "") {
		return sec, fmt.Errorf("%w: --tls-cert and --tls-key go together", cli.ErrUsage)
	}
	if s.clientCA != "" && s.cert == "" {
		return sec, fmt.Errorf("%w: --tls-client-ca needs --tls-cert", cli.ErrUsage)
	}
	if s.cert != "" {
		cert, err := tls.LoadX509KeyPair(s.cert, s.key)
		if err != nil {
			return sec, fmt.Errorf("loading --tls-cert: %w", err)
		}
		sec.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		if s.clientCA != "" {
			pem, err := os.ReadFile(s.clientCA)
			if err != nil {
				return sec, fmt.Errorf("reading --tls-client-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return sec, fmt.Errorf("%w: no PEM certificate in --tls-client-ca %s", cli.ErrUsage, s.clientCA)
			}
			sec.TLS.ClientCAs, sec.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
	}
	if (s.user == "") != (s.password == "") {
		return sec, fmt.Errorf("%w: --user and --password go together", cli.ErrUsage)
	}
	if s.user != "" {
		sec.Users = []embedded.User{{Name: s.user, Password: s.password}}
	}
	for i, r := range roles.Roles() {
		if s.rolePasswords[i] == "" {
			continue
		}
		if string(r) == s.user {
			return sec, fmt.Errorf("%w: --user %q is also a role user", cli.ErrUsage, s.user)
		}
		sec.Users = append(sec.Users, r.User(s.rolePasswords[i], s.prefix, s.group))
	}
	for _, k := range strings.Split(s.natsNKeys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			sec.NATSNKeys = append(sec.NATSNKeys, k)
		}
	}
	sec.NATSToken = s.natsToken
	return sec, nil
}

func run(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("brokers", flag.ContinueOnError)
	kafkaListen := fs.String("kafka-listen", "127.0.0.1:9092", "host:port of the embedded Kafka broker")
	natsListen := fs.String("nats-listen", "127.0.0.1:4222", "host:port of the embedded NATS server")
	dataDir := fs.String("data-dir", "", "persist Kafka and JetStream data under this directory (empty: Kafka in memory)")
	partitions := fs.Int("partitions", 3, "partitions of each Switchyard topic")
	maxPayload := fs.Int("nats-max-payload", embedded.DefaultNATSMaxPayload, "largest NATS message in bytes (NATS's own default is 1 MiB; a 20,000-engine snapshot is ~2 MB)")
	prefix := fs.String("topic-prefix", streams.DefaultPrefix, "prefix of the Switchyard topics to create")
	allowOpen := fs.Bool("allow-open", false, "allow listening on a non-loopback address without credentials (anyone who reaches the port can then route every prompt)")
	var sf securityFlags
	sf.register(fs)
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	sf.prefix = *prefix
	sec, err := sf.security()
	if err != nil {
		return err
	}
	if !*allowOpen && len(sec.Users) == 0 && len(sec.NATSNKeys) == 0 && sec.NATSToken == "" {
		for _, addr := range []string{*kafkaListen, *natsListen} {
			if !loopback(addr) {
				return fmt.Errorf("%w: %s is not a loopback address and no credentials are required: give role passwords (--gateway-password, ...) or --user, or --allow-open", cli.ErrUsage, addr)
			}
		}
	}
	b, err := embedded.Start(ctx, embedded.Config{
		KafkaListen: *kafkaListen, NATSListen: *natsListen, DataDir: *dataDir, KafkaPartitions: *partitions, Security: sec,
		NATSMaxPayload: int32(min(*maxPayload, math.MaxInt32)),
	})
	if err != nil {
		return err
	}
	defer b.Close()
	topics := streams.TopicsFor(*prefix)
	if err := b.EnsureTopics(topics.All(), []string{topics.Estimates}, int32(*partitions)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kafka: %s\nnats: %s\n", b.KafkaAddrs()[0], b.NATSURL())
	<-ctx.Done()
	return nil
}

// loopback reports whether the listen address addr (host:port) is on
// loopback only; an empty host is all interfaces.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
