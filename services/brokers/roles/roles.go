// Package roles holds the least NATS permissions and Kafka ACLs of each
// Switchyard service (docs/security.md), for the users of `switchyard
// brokers` (brokers.Security) and the broker configurations generated
// under deploy/. It knows every service's topics and subjects, so it sits
// with the services, above the stream packages; internal/brokers (the
// embedded brokers, which the stream packages' tests start) takes its
// users as plain values.
package roles

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-llm/switchyard/internal/brokers"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/settings"
)

// NATSRole is the least NATS permission set of a Switchyard service with
// the default snapshot bucket and audit stream (docs/security.md shows
// them as nats-server configuration).
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
	// NATSReader looks the bucket up and reads it and the audit stream
	// (console, explain, replay --verify).
	NATSReader NATSRole = "reader"
	// NATSNone may neither publish nor subscribe (the agent and the
	// processor use no NATS).
	NATSNone NATSRole = "none"
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
	case NATSReader:
		return &server.Permissions{Publish: &server.SubjectPermission{Allow: append(readKV,
			"$JS.API.STREAM.INFO."+audit,
			"$JS.API.CONSUMER.CREATE."+audit+".>", "$JS.API.CONSUMER.DELETE."+audit+".>",
			"$JS.API.CONSUMER.INFO."+audit+".>", "$JS.API.CONSUMER.MSG.NEXT."+audit+".>",
		)}, Subscribe: sub}
	default: // NATSNone, and any role this package does not know
		deny := &server.SubjectPermission{Deny: []string{">"}}
		return &server.Permissions{Publish: deny, Subscribe: deny}
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
	// KafkaReader reads and describes every Switchyard topic and writes
	// none (tap, console, replay, explain).
	KafkaReader KafkaRole = "reader"
)

// ACLs returns r's ACLs for the topics under prefix and the processor's
// consumer group. Topic creation is left to the brokers command (or an
// administrator); a service that may not create topics logs that and
// goes on.
func (r KafkaRole) ACLs(prefix, group string) []kfake.ACL {
	t := streams.TopicsFor(prefix)
	checkpoints, recorded, partials := process.CheckpointTopic(prefix), settings.Topic(prefix), process.PartialsTopic(prefix)
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
		// The agent's user also runs `switchyard kvevents`, the other
		// engine-side publisher (docs/kvevents.md).
		acls = topic(t.Signals, write, describe)
		acls = append(acls, topic(t.KVEvents, write, describe)...)
		acls = append(acls, topic(t.DeadLetter, write, describe)...)
	case KafkaGateway:
		acls = append(topic(t.RoutingEvents, write, describe), topic(t.Signals, read, describe)...)
		acls = append(acls, topic(t.RoutingArrivals, write, describe)...)
	case KafkaProcessor:
		acls = append(acls, topic(t.Signals, read, describe)...)
		acls = append(acls, topic(t.RoutingEvents, read, describe)...)
		acls = append(acls, topic(t.RoutingArrivals, read, describe)...)
		acls = append(acls, topic(t.Estimates, write, describe)...)
		acls = append(acls, topic(t.DeadLetter, write, describe)...)
		// Describe only: the processor checks that every topic exists
		// before creating the missing ones (streams/process).
		acls = append(acls, topic(t.KVEvents, describe)...)
		acls = append(acls, topic(checkpoints, read, write, describe)...)
		acls = append(acls, topic(recorded, write, describe)...)
		// Partitioned processing: the instances write partials, the
		// combiner reads them (and writes tombstones).
		acls = append(acls, topic(partials, read, write, describe)...)
		acls = append(acls, kfake.ACL{Resource: kmsg.ACLResourceTypeGroup, Name: group,
			Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: read, Allow: true})
	case KafkaOptimizer:
		acls = append(topic(t.Estimates, read, describe), topic(t.DeadLetter, write, describe)...)
		acls = append(acls, topic(recorded, write, describe)...)
	case KafkaReader:
		for _, name := range append(t.All(), checkpoints, recorded, partials) {
			acls = append(acls, topic(name, read, describe)...)
		}
	}
	return acls
}

// Role is a Switchyard service's user on both brokers: its NATS
// permissions and its Kafka ACLs.
type Role string

// The roles `switchyard brokers` makes a user for (docs/security.md).
const (
	Agent     Role = "agent"
	Processor Role = "processor" // also the partitioned instances and the combiner
	Optimizer Role = "optimizer"
	Gateway   Role = "gateway"
	Reader    Role = "reader" // tap, console, replay, explain
)

// Roles returns every role, in a fixed order.
func Roles() []Role { return []Role{Agent, Processor, Optimizer, Gateway, Reader} }

// NATS returns r's NATS role.
func (r Role) NATS() NATSRole {
	switch r {
	case Optimizer:
		return NATSOptimizer
	case Gateway:
		return NATSGateway
	case Reader:
		return NATSReader
	default:
		return NATSNone
	}
}

// Kafka returns r's Kafka role.
func (r Role) Kafka() KafkaRole { return KafkaRole(r) }

// User returns the broker user named after r with password, holding
// only r's permissions for the topics under prefix and the processor's
// consumer group.
func (r Role) User(password, prefix, group string) brokers.User {
	acls := r.Kafka().ACLs(prefix, group)
	if len(acls) == 0 {
		// kfake treats a user without ACLs as a superuser: give an
		// unknown role a grant that allows nothing useful instead.
		acls = []kfake.ACL{{Resource: kmsg.ACLResourceTypeTopic, Name: "switchyard.none", Pattern: kmsg.ACLResourcePatternTypeLiteral,
			Operation: kmsg.ACLOperationDescribe, Allow: true}}
	}
	return brokers.User{Name: string(r), Password: password, NATSPermissions: r.NATS().Permissions(), KafkaACLs: acls}
}
