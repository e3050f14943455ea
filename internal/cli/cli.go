// Package cli holds the small conventions every switchyard subcommand
// shares: a Command value, flags that fall back to SWITCHYARD_* environment
// variables, and the common connection flags.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/connect"
)

// Command is one `switchyard <name>` subcommand. Run parses args itself
// (with a flag.FlagSet named after the command) and returns when ctx is
// done or the work is finished. It writes results to stdout and
// diagnostics to stderr; it never calls os.Exit.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// ErrUsage marks an error caused by bad flags or arguments; main exits 2.
var ErrUsage = errors.New("usage")

// ErrHelp marks a request for help (-h, --help): main prints the
// HelpError's text to stdout and exits 0. It wraps ErrUsage, so a caller
// that only knows ErrUsage still sees a usage outcome.
var ErrHelp = fmt.Errorf("%w: help requested", ErrUsage)

// HelpError is a command's help text, returned by Parse for -h or --help.
type HelpError struct{ Text string }

func (e *HelpError) Error() string { return e.Text }

// Unwrap makes errors.Is(err, ErrHelp) and errors.Is(err, ErrUsage) hold.
func (e *HelpError) Unwrap() error { return ErrHelp }

// EnvName is the environment variable that backs flag name:
// "kafka-brokers" -> "SWITCHYARD_KAFKA_BROKERS".
func EnvName(name string) string {
	return "SWITCHYARD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Parse parses args into fs; every flag not given on the command line
// takes its value from its SWITCHYARD_* environment variable when that is
// set and not empty. A variable set to the empty string is the same as an
// unset one: the flag keeps its default (to turn a string flag off, pass
// it empty on the command line, `--nats-url ""`). getenv may be nil (the
// process environment). -h and --help return a *HelpError; any other
// parse error wraps ErrUsage.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &HelpError{Text: Usage(fs)}
		}
		return fmt.Errorf("%w: %v\n%s", ErrUsage, err, Usage(fs))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		v := getenv(EnvName(f.Name))
		if v == "" {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%w: environment %s=%q: %v", ErrUsage, EnvName(f.Name), v, err))
		}
	})
	return errors.Join(errs...)
}

// Usage renders fs's flags as the help text of its command.
func Usage(fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: switchyard %s [flags]\n", fs.Name())
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(&b, "  --%s (env %s, default %q)\n      %s\n", f.Name, EnvName(f.Name), f.DefValue, f.Usage)
	})
	return b.String()
}

// Connection holds the flags every networked service takes: where the
// brokers are, and how to reach them securely (TLS, NATS credentials,
// Kafka SASL; see docs/security.md). Every flag also reads its SWITCHYARD_*
// variable, the better place for secrets (SWITCHYARD_NATS_PASSWORD,
// SWITCHYARD_KAFKA_PASSWORD, SWITCHYARD_NATS_TOKEN).
type Connection struct {
	KafkaBrokers string // comma-separated host:port list
	NATSURL      string
	TopicPrefix  string
	// NATS and Kafka are the security settings of each broker.
	NATS  connect.NATS
	Kafka connect.Kafka
	// Replication is how the topics, the snapshot bucket and the audit
	// stream are replicated when a command creates them (RegisterReplication).
	Replication Replication
}

// Replication holds the replication flags of the commands that create
// topics or the snapshot store. Zero values keep the brokers' defaults,
// right for one broker (docs/deploy.md#clustered-brokers).
type Replication struct {
	KafkaFactor    int // --kafka-replication-factor
	KafkaMinInsync int // --kafka-min-insync-replicas
	NATSReplicas   int // --nats-replicas
}

// RegisterReplication adds --kafka-replication-factor and
// --kafka-min-insync-replicas (topics the command creates), and with nats
// --nats-replicas (the snapshot bucket and audit stream), to fs.
func (c *Connection) RegisterReplication(fs *flag.FlagSet, nats bool) {
	fs.IntVar(&c.Replication.KafkaFactor, "kafka-replication-factor", 0, "replication factor of the Kafka topics this command creates (0: the brokers' default.replication.factor)")
	fs.IntVar(&c.Replication.KafkaMinInsync, "kafka-min-insync-replicas", 0, "min.insync.replicas of the Kafka topics this command creates (0: the brokers' default)")
	if nats {
		fs.IntVar(&c.Replication.NATSReplicas, "nats-replicas", 0, "JetStream replicas of the snapshot bucket and audit stream (0: 1 when creating them, an existing count kept)")
	}
}

// DefaultKafkaBrokers and DefaultNATSURL match `switchyard brokers` defaults.
const (
	DefaultKafkaBrokers = "127.0.0.1:9092"
	DefaultNATSURL      = "nats://127.0.0.1:4222"
)

// Register adds --kafka-brokers, --nats-url, --topic-prefix and the TLS and
// credential flags of both brokers to fs.
func (c *Connection) Register(fs *flag.FlagSet) {
	c.RegisterKafka(fs)
	fs.StringVar(&c.NATSURL, "nats-url", DefaultNATSURL, "NATS server URL (JetStream enabled), or a comma-separated list of a cluster's servers")
	RegisterTLS(fs, "nats", &c.NATS.TLS)
	fs.StringVar(&c.NATS.User, "nats-user", "", "NATS user (with --nats-password)")
	fs.StringVar(&c.NATS.Password, "nats-password", "", "NATS password (prefer the environment variable)")
	fs.StringVar(&c.NATS.Token, "nats-token", "", "NATS authentication token (prefer the environment variable)")
	fs.StringVar(&c.NATS.NKeySeedFile, "nats-nkey-seed", "", "file holding the NATS nkey user seed (SU...)")
	fs.StringVar(&c.NATS.CredsFile, "nats-creds", "", "NATS .creds file (user JWT and seed)")
}

// RegisterKafka adds --kafka-brokers, --topic-prefix and Kafka's TLS and
// SASL flags to fs, for commands that use Kafka only.
func (c *Connection) RegisterKafka(fs *flag.FlagSet) {
	fs.StringVar(&c.KafkaBrokers, "kafka-brokers", DefaultKafkaBrokers, "comma-separated Kafka bootstrap brokers")
	fs.StringVar(&c.TopicPrefix, "topic-prefix", "switchyard", "prefix of every Kafka topic name")
	RegisterTLS(fs, "kafka", &c.Kafka.TLS)
	fs.StringVar(&c.Kafka.Mechanism, "kafka-sasl", "", "Kafka SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none)")
	fs.StringVar(&c.Kafka.User, "kafka-user", "", "Kafka SASL user")
	fs.StringVar(&c.Kafka.Password, "kafka-password", "", "Kafka SASL password (prefer the environment variable)")
}

// RegisterTLS adds --NAME-tls, --NAME-ca, --NAME-cert, --NAME-key and
// --NAME-tls-server-name to fs.
func RegisterTLS(fs *flag.FlagSet, name string, t *connect.TLS) {
	fs.BoolVar(&t.Enable, name+"-tls", false, "connect to "+name+" with TLS (implied by the CA and cert flags)")
	fs.StringVar(&t.CAFile, name+"-ca", "", "PEM file of the CAs that verify the "+name+" server (default: system roots)")
	fs.StringVar(&t.CertFile, name+"-cert", "", "PEM client certificate for "+name+" (with its key)")
	fs.StringVar(&t.KeyFile, name+"-key", "", "PEM key of the "+name+" client certificate")
	fs.StringVar(&t.ServerName, name+"-tls-server-name", "", "name the "+name+" server certificate must carry (default: the host)")
}

// Brokers splits KafkaBrokers.
func (c Connection) Brokers() []string {
	var out []string
	for _, b := range strings.Split(c.KafkaBrokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// KafkaOpts returns the seed brokers and the TLS and SASL options of the
// Kafka connection.
func (c Connection) KafkaOpts() ([]kgo.Opt, error) {
	sec, err := c.Kafka.Options()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return append([]kgo.Opt{kgo.SeedBrokers(c.Brokers()...)}, sec...), nil
}

// NewKafka is kgo.NewClient with KafkaOpts and then opts (a drop-in
// replacement: its errors are kgo's, or ErrUsage for bad settings).
func (c Connection) NewKafka(opts ...kgo.Opt) (*kgo.Client, error) {
	base, err := c.KafkaOpts()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(base, opts...)...)
}

// NATSOpts returns the TLS and credential options of the NATS connection.
func (c Connection) NATSOpts() ([]nats.Option, error) {
	opts, err := c.NATS.Options()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return opts, nil
}

// ConnectNATS is nats.Connect(NATSURL) with NATSOpts and then opts (a
// drop-in replacement: its errors are nats.go's, or ErrUsage for bad
// settings).
func (c Connection) ConnectNATS(opts ...nats.Option) (*nats.Conn, error) {
	base, err := c.NATSOpts()
	if err != nil {
		return nil, err
	}
	return nats.Connect(c.NATSURL, append(base, opts...)...)
}

// Version writes the binary's version, module, VCS revision and time (and
// whether the tree was modified) and Go version, from its build info.
// version, when not empty, is the version injected at link time
// (`-ldflags "-X main.version=v1.2.3"`) and wins over the module version.
// A binary built without VCS info (-buildvcs=false, or outside a git tree)
// says so instead of naming a revision.
func Version(w io.Writer, version string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	writeVersion(w, version, bi)
}

func writeVersion(w io.Writer, version string, bi *debug.BuildInfo) {
	if bi == nil {
		bi = &debug.BuildInfo{}
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if version == "" {
		version = bi.Main.Version
	}
	if version == "" {
		version = "(devel)"
	}
	fmt.Fprintf(w, "switchyard %s\n", version)
	if bi.Main.Path != "" {
		fmt.Fprintf(w, "module %s\n", bi.Main.Path)
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		fmt.Fprintf(w, "revision %s\n", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(w, "built from a commit of %s\n", t)
		}
	} else {
		fmt.Fprintln(w, "built without VCS info (no revision: -buildvcs=false or no git tree)")
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	fmt.Fprintf(w, "go %s\n", goVersion)
}
