package brokers

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// saslMechanisms are the mechanisms every user gets on Kafka.
var saslMechanisms = [...]string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// natsSecurity applies sec to the NATS server options.
func natsSecurity(o *server.Options, sec Security) {
	if sec.TLS != nil {
		o.TLSConfig = sec.TLS
		o.TLS = true
		o.TLSVerify = sec.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		o.TLSTimeout = 2
	}
	for _, u := range sec.Users {
		o.Users = append(o.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: u.NATSPermissions})
	}
	for _, k := range sec.NATSNKeys {
		o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: k})
	}
	if len(o.Users) == 0 && len(o.Nkeys) == 0 && sec.NATSToken != "" {
		o.Authorization = sec.NATSToken
	}
	if sec.authOn() {
		o.AuthTimeout = 2
	}
}

// kafkaSecurity returns the kfake options of sec.
func kafkaSecurity(sec Security) []kfake.Opt {
	var opts []kfake.Opt
	if sec.TLS != nil {
		opts = append(opts, kfake.TLS(sec.TLS))
	}
	if len(sec.Users) == 0 {
		return opts
	}
	opts = append(opts, kfake.EnableSASL())
	acls := false
	for _, u := range sec.Users {
		for _, m := range saslMechanisms {
			if len(u.KafkaACLs) == 0 {
				opts = append(opts, kfake.Superuser(m, u.Name, u.Password))
			} else {
				opts = append(opts, kfake.User(m, u.Name, u.Password, u.KafkaACLs...))
				acls = true
			}
		}
	}
	if acls {
		opts = append(opts, kfake.EnableACLs())
	}
	return opts
}

// EnsureTopics creates topics on the embedded Kafka directly (no client,
// so it works whatever the listener requires), partitions partitions each
// (3 when not positive), but the compacted ones (cleanup.policy=compact)
// with one partition, as streams.EnsureTopics creates the estimates topic
// through a client. Existing topics are kept.
func (b *Brokers) EnsureTopics(topics, compacted []string, partitions int32) error {
	if partitions <= 0 {
		partitions = 3
	}
	for _, name := range topics {
		var cfg map[string]string
		n := partitions
		if slices.Contains(compacted, name) {
			cfg, n = map[string]string{"cleanup.policy": "compact"}, 1
		}
		if err := b.Kafka.CreateTopic(name, n, cfg); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %q: %w", name, err)
		}
	}
	return nil
}
