// Package connect turns the connection settings every service shares
// (TLS files, NATS credentials, Kafka SASL) into client options: franz-go
// kgo options and nats.go options. It only builds options; callers create
// the clients.
package connect

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// ErrConfig marks an invalid combination of settings.
var ErrConfig = errors.New("invalid connection settings")

// TLS names the PEM files of a TLS client. The zero value is no TLS.
type TLS struct {
	// Enable turns TLS on with the system's root CAs when no CAFile is
	// given. Any of the files also turns TLS on.
	Enable bool
	// CAFile holds the CA certificates that verify the server (PEM).
	CAFile string
	// CertFile and KeyFile are the client certificate and its key (PEM),
	// for servers that require client certificates. Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name the server certificate is checked
	// against (default: the host dialled).
	ServerName string
}

// On reports whether TLS is configured.
func (t TLS) On() bool { return t.Enable || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// Config returns the client TLS configuration, or nil when TLS is off.
func (t TLS) Config() (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both a cert and a key file", ErrConfig)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: no PEM certificate in CA file %s", ErrConfig, t.CAFile)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// NATS is how a service authenticates to NATS. At most one of
// user/password, token, nkey seed and creds file may be set.
type NATS struct {
	TLS      TLS
	User     string
	Password string
	Token    string
	// NKeySeedFile holds an nkey user seed (SU...).
	NKeySeedFile string
	// CredsFile is a decentralised-auth .creds file (user JWT and seed).
	CredsFile string
}

// Validate reports conflicting settings.
func (n NATS) Validate() error {
	methods := 0
	for _, set := range []bool{n.User != "" || n.Password != "", n.Token != "", n.NKeySeedFile != "", n.CredsFile != ""} {
		if set {
			methods++
		}
	}
	if methods > 1 {
		return fmt.Errorf("%w: nats: choose one of user/password, token, nkey seed and creds file", ErrConfig)
	}
	if n.Password != "" && n.User == "" {
		return fmt.Errorf("%w: nats: a password needs a user", ErrConfig)
	}
	return nil
}

// Options returns the nats.go options of n (none when n is the zero value).
func (n NATS) Options() ([]nats.Option, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	tc, err := n.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("nats tls: %w", err)
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	switch {
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	case n.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(n.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed: %w", err)
		}
		opts = append(opts, o)
	case n.CredsFile != "":
		if _, err := os.Stat(n.CredsFile); err != nil {
			return nil, fmt.Errorf("nats creds file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	return opts, nil
}

// SASL mechanisms Kafka accepts.
const (
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
)

// Kafka is how a service authenticates to Kafka.
type Kafka struct {
	TLS TLS
	// Mechanism is the SASL mechanism: "" (no SASL), PLAIN, SCRAM-SHA-256
	// or SCRAM-SHA-512 (case-insensitive).
	Mechanism string
	User      string
	Password  string
}

// mechanism returns the SASL mechanism of k, nil for none.
func (k Kafka) mechanism() (sasl.Mechanism, error) {
	m := strings.ToUpper(strings.TrimSpace(k.Mechanism))
	if m == "" {
		if k.User != "" || k.Password != "" {
			return nil, fmt.Errorf("%w: kafka: a SASL user needs a mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", ErrConfig)
		}
		return nil, nil
	}
	if k.User == "" {
		return nil, fmt.Errorf("%w: kafka: SASL %s needs a user", ErrConfig, m)
	}
	switch m {
	case MechPlain:
		return plain.Auth{User: k.User, Pass: k.Password}.AsMechanism(), nil
	case MechScramSHA256:
		return scram.Auth{User: k.User, Pass: k.Password}.AsSha256Mechanism(), nil
	case MechScramSHA512:
		return scram.Auth{User: k.User, Pass: k.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("%w: kafka: SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", ErrConfig, k.Mechanism)
}

// Validate reports invalid settings (without reading files).
func (k Kafka) Validate() error {
	_, err := k.mechanism()
	return err
}

// Options returns the kgo options of k (none when k is the zero value).
func (k Kafka) Options() ([]kgo.Opt, error) {
	m, err := k.mechanism()
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	tc, err := k.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("kafka tls: %w", err)
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}
