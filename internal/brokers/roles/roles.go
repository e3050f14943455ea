// Package roles holds the least NATS permissions and Kafka ACLs of each
// Switchyard service (docs/security.md), for brokers.Security and its
// tests. It is separate from package brokers so that brokers stays free of
// the stream packages (whose tests start brokers).
package roles

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/settings"
)

// NATSRole is the least NATS permission set of a Switchyard service with
// the default snapshot bucket and audit stream (docs/security.md shows
// them as nats-server configuration). explain and console open the
// bucket with create-or-update, so today they need NATSOptimizer.
type NATSRole string

// The NATS roles.
const (
	// NATSOptimizer creates the snapshot bucket and audit stream and
	// writes both.
	NATSOptimizer NATSRole = "optimizer"
	// NATSGateway watches the snapshot bucket (it cannot write it), and
	// publishes and subscribes to the gateways' load reports
	// (PeerLoadSubjects, gateway/peers).
	NATSGateway NATSRole = "gateway"
)

// PeerLoadSubjects is the subject of every gateway's load reports with
// the default prefix (peers.Wildcard("")).
const PeerLoadSubjects = "switchyard.gateway.load.>"

// Permissions returns r's permissions.
func (r NATSRole) Permissions() *server.Permissions {
	const (
		kv    = "KV_switchyard_snapshots"
		audit = "SWITCHYARD_SNAPSHOT_AUDIT"
	)
	readKV := []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + kv,
		"$JS.API.CONSUMER.CREATE." + kv + ".>",
		"$JS.API.CONSUMER.DELETE." + kv + ".>",
		"$JS.API.DIRECT.GET." + kv + ".>",
		"$JS.API.STREAM.MSG.GET." + kv,
		"$JS.FC." + kv + ".>",
	}
	sub := &server.SubjectPermission{Allow: []string{"_INBOX.>"}}
	switch r {
	case NATSOptimizer:
		return &server.Permissions{Publish: &server.SubjectPermission{Allow: append(readKV,
			"$JS.API.STREAM.CREATE."+kv, "$JS.API.STREAM.UPDATE."+kv,
			"$JS.API.STREAM.CREATE."+audit, "$JS.API.STREAM.UPDATE."+audit, "$JS.API.STREAM.INFO."+audit,
			"$KV.switchyard_snapshots.>", "switchyard.snapshots.audit",
		)}, Subscribe: sub}
	case NATSGateway:
		return &server.Permissions{Publish: &server.SubjectPermission{Allow: append(readKV, PeerLoadSubjects)},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", PeerLoadSubjects}}}
	default:
		return &server.Permissions{Publish: &server.SubjectPermission{Allow: readKV}, Subscribe: sub}
	}
}

// KafkaRole is a Switchyard service's least Kafka ACL set.
type KafkaRole string

// The Kafka roles.
const (
	KafkaAgent     KafkaRole = "agent"
	KafkaGateway   KafkaRole = "gateway"
	KafkaProcessor KafkaRole = "processor"
	KafkaOptimizer KafkaRole = "optimizer"
)

// ACLs returns r's ACLs for the topics under prefix and the processor's
// consumer group. Topic creation is left to the brokers command (or an
// administrator); a service that may not create topics logs that and
// goes on.
func (r KafkaRole) ACLs(prefix, group string) []kfake.ACL {
	t := streams.TopicsFor(prefix)
	checkpoints, recorded := process.CheckpointTopic(prefix), settings.Topic(prefix)
	topic := func(name string, ops ...kmsg.ACLOperation) []kfake.ACL {
		var out []kfake.ACL
		for _, op := range ops {
			out = append(out, kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: name,
				Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true})
		}
		return out
	}
	const (
		read     = kmsg.ACLOperationRead
		write    = kmsg.ACLOperationWrite
		describe = kmsg.ACLOperationDescribe
	)
	var acls []kfake.ACL
	switch r {
	case KafkaAgent:
		acls = topic(t.Signals, write, describe)
	case KafkaGateway:
		acls = append(topic(t.RoutingEvents, write, describe), topic(t.Signals, read, describe)...)
	case KafkaProcessor:
		acls = append(acls, topic(t.Signals, read, describe)...)
		acls = append(acls, topic(t.RoutingEvents, read, describe)...)
		acls = append(acls, topic(t.Estimates, write, describe)...)
		acls = append(acls, topic(t.DeadLetter, write, describe)...)
		acls = append(acls, topic(checkpoints, read, write, describe)...)
		acls = append(acls, topic(recorded, write, describe)...)
		acls = append(acls, kfake.ACL{Resource: kmsg.ACLResourceTypeGroup, Name: group,
			Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: read, Allow: true})
	case KafkaOptimizer:
		acls = append(topic(t.Estimates, read, describe), topic(t.DeadLetter, write, describe)...)
		acls = append(acls, topic(recorded, write, describe)...)
	}
	return acls
}
