package connect

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/brokers/devcerts"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nats  NATS
		kafka Kafka
		bad   bool
	}{
		{name: "zero"},
		{name: "nats user", nats: NATS{User: "u", Password: "p"}},
		{name: "nats token", nats: NATS{Token: "t"}},
		{name: "nats two methods", nats: NATS{User: "u", Token: "t"}, bad: true},
		{name: "nats password alone", nats: NATS{Password: "p"}, bad: true},
		{name: "kafka plain", kafka: Kafka{Mechanism: "plain", User: "u", Password: "p"}},
		{name: "kafka scram-512", kafka: Kafka{Mechanism: "SCRAM-SHA-512", User: "u", Password: "p"}},
		{name: "kafka unknown mechanism", kafka: Kafka{Mechanism: "GSSAPI", User: "u"}, bad: true},
		{name: "kafka user without mechanism", kafka: Kafka{User: "u", Password: "p"}, bad: true},
		{name: "kafka mechanism without user", kafka: Kafka{Mechanism: "PLAIN"}, bad: true},
		{name: "cert without key", kafka: Kafka{TLS: TLS{CertFile: "c.pem"}}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, nerr := tc.nats.Options()
			_, kerr := tc.kafka.Options()
			err := errors.Join(nerr, kerr)
			if (err != nil) != tc.bad {
				t.Fatalf("err %v, want bad %v", err, tc.bad)
			}
			if tc.bad && !errors.Is(err, ErrConfig) {
				t.Fatalf("err %v is not ErrConfig", err)
			}
		})
	}
}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	p, err := devcerts.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := TLS{CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ClientKey, ServerName: "localhost"}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "localhost" {
		t.Fatalf("config %+v", c)
	}
	if c, err := (TLS{}).Config(); c != nil || err != nil {
		t.Fatalf("zero TLS: %v, %v", c, err)
	}
	if c, err := (TLS{Enable: true}).Config(); c == nil || c.RootCAs != nil || err != nil {
		t.Fatalf("system roots: %v, %v", c, err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (TLS{CAFile: notPEM}).Config(); !errors.Is(err, ErrConfig) {
		t.Fatalf("CA file without PEM: %v", err)
	}
	if _, err := (TLS{CAFile: filepath.Join(dir, "missing.pem")}).Config(); err == nil {
		t.Fatal("missing CA file accepted")
	}
	if _, err := (NATS{NKeySeedFile: filepath.Join(dir, "missing.nk")}).Options(); err == nil {
		t.Fatal("missing nkey seed accepted")
	}
	if _, err := (NATS{CredsFile: filepath.Join(dir, "missing.creds")}).Options(); err == nil {
		t.Fatal("missing creds file accepted")
	}
}
