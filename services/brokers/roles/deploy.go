package roles

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/settings"
)

// This file renders the roles for real brokers: the nats-server
// authorization block and the script that creates the topics, the SCRAM
// users and the ACLs on Apache Kafka (docker-compose.yml and the
// three-region-ha overlay run them; docs/deploy.md#broker-credentials).

// KafkaMechanism is the SASL mechanism the deployments' Kafka clients
// use and the role users' credentials are created for.
const KafkaMechanism = "SCRAM-SHA-512"

// KafkaAdmin is the Kafka super user of the deployments: the brokers and
// controllers authenticate to each other as it (SASL PLAIN, on the
// internal and controller listeners only) and the setup script creates
// the role users as it. Its password is in AdminPasswordEnv.
const KafkaAdmin = "admin"

// AdminPasswordEnv holds KafkaAdmin's password.
const AdminPasswordEnv = "SWITCHYARD_KAFKA_ADMIN_PASSWORD"

// PasswordEnv is the variable holding r's password, as `switchyard
// brokers` reads it: SWITCHYARD_<ROLE>_PASSWORD.
func (r Role) PasswordEnv() string { return "SWITCHYARD_" + strings.ToUpper(string(r)) + "_PASSWORD" }

// Topic is a Switchyard topic as the setup script creates it.
type Topic struct {
	Name       string
	Partitions int32
	Config     map[string]string
}

// Topics returns every topic under prefix with partitions partitions (1
// for the estimates, checkpoint, partials and settings topics) and the
// configuration the commands create it with (streams.EnsureTopics,
// process.CheckpointTopic, process.PartialsTopic, settings.Topic); the
// replication is left to the brokers' defaults.
func Topics(prefix string, partitions int32) []Topic {
	t := streams.TopicsFor(prefix)
	var out []Topic
	for _, name := range t.All() {
		n := partitions
		if name == t.Estimates {
			n = 1
		}
		cfg := map[string]string{}
		for k, v := range t.Config(name) {
			cfg[k] = *v
		}
		out = append(out, Topic{Name: name, Partitions: n, Config: cfg})
	}
	compact := map[string]string{"cleanup.policy": "compact"}
	return append(out,
		Topic{Name: process.CheckpointTopic(prefix), Partitions: 1, Config: compact},
		Topic{Name: process.PartialsTopic(prefix), Partitions: 1, Config: compact},
		Topic{Name: settings.Topic(prefix), Partitions: 1, Config: map[string]string{}},
	)
}

const generated = "Generated from services/brokers/roles (roles.go, deploy.go) by\n# `go test ./services/switchyard -run TestBrokerConfigsGenerated -update-broker-configs`: do not edit."

// NATSAuthorization returns the nats-server authorization block with one
// user per role that uses NATS, named after it, holding exactly its
// NATSRole's permissions; each password is the variable PasswordEnv, which
// nats-server resolves from its environment.
func NATSAuthorization() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n#\n", generated)
	b.WriteString("# One user per Switchyard role that uses NATS, with the least permissions of\n")
	b.WriteString("# docs/security.md#least-privilege; the passwords come from the server's\n")
	b.WriteString("# environment. No user is anonymous: a client without credentials is refused.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, r := range Roles() {
		if r.NATS() == NATSNone {
			continue
		}
		p := r.NATS().Permissions()
		fmt.Fprintf(&b, "    {user: %s, password: $%s, permissions: {\n", r, r.PasswordEnv())
		writeSubjects(&b, "publish", p.Publish)
		writeSubjects(&b, "subscribe", p.Subscribe)
		b.WriteString("    }}\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeSubjects(b *strings.Builder, name string, sp *server.SubjectPermission) {
	if sp == nil {
		return
	}
	fmt.Fprintf(b, "      %s: {", name)
	sep := ""
	for _, list := range []struct {
		key      string
		subjects []string
	}{{"allow", sp.Allow}, {"deny", sp.Deny}} {
		if len(list.subjects) == 0 {
			continue
		}
		quoted := make([]string, len(list.subjects))
		for i, s := range list.subjects {
			quoted[i] = fmt.Sprintf("%q", s)
		}
		fmt.Fprintf(b, "%s%s: [\n        %s\n      ]", sep, list.key, strings.Join(quoted, ",\n        "))
		sep = ", "
	}
	b.WriteString("}\n")
}

// aclOperations names the ACL operations as kafka-acls.sh spells them.
var aclOperations = map[kmsg.ACLOperation]string{
	kmsg.ACLOperationRead: "Read", kmsg.ACLOperationWrite: "Write", kmsg.ACLOperationDescribe: "Describe",
	kmsg.ACLOperationCreate: "Create", kmsg.ACLOperationDelete: "Delete", kmsg.ACLOperationAlter: "Alter",
	kmsg.ACLOperationDescribeConfigs: "DescribeConfigs", kmsg.ACLOperationAlterConfigs: "AlterConfigs",
	kmsg.ACLOperationIdempotentWrite: "IdempotentWrite", kmsg.ACLOperationClusterAction: "ClusterAction",
}

// aclResources names the resource types as kafka-acls.sh's options.
var aclResources = map[kmsg.ACLResourceType]string{
	kmsg.ACLResourceTypeTopic: "--topic", kmsg.ACLResourceTypeGroup: "--group",
	kmsg.ACLResourceTypeTransactionalId: "--transactional-id",
}

// KafkaSetupScript returns a POSIX sh script for the apache/kafka image
// that, as KafkaAdmin on $KAFKA_BOOTSTRAP (SASL PLAIN, password from
// AdminPasswordEnv), waits for the brokers, creates Topics(prefix,
// partitions) when missing, one SCRAM (KafkaMechanism) user per role with
// the password of its PasswordEnv, and exactly each role's KafkaRole.ACLs
// (prefix, group). Running it again changes nothing but the passwords.
func KafkaSetupScript(prefix, group string, partitions int32) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# %s\n#\n", generated)
	b.WriteString(`# Creates the Switchyard topics, one SCRAM user per role and each role's
# least-privilege ACLs (docs/security.md#least-privilege) on Apache Kafka,
# as the super user admin over SASL PLAIN. Needs KAFKA_BOOTSTRAP (the
# brokers' internal listener) and the passwords below in the environment.
set -eu
`)
	fmt.Fprintf(&b, ": \"${KAFKA_BOOTSTRAP:?}\" \"${%s:?}\"", AdminPasswordEnv)
	for _, r := range Roles() {
		fmt.Fprintf(&b, " \"${%s:?}\"", r.PasswordEnv())
	}
	fmt.Fprintf(&b, `
bin=/opt/kafka/bin
umask 077
cfg=$(mktemp)
trap 'rm -f "$cfg"' EXIT
cat >"$cfg" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="%s" password="${%s}";
EOF
i=0
until "$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$cfg" --list >/dev/null; do
  i=$((i + 1))
  if [ "$i" -ge 60 ]; then echo "kafka-setup: no broker at $KAFKA_BOOTSTRAP" >&2; exit 1; fi
  sleep 5
done
topic() {
  name=$1 partitions=$2
  shift 2
  "$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$cfg" --create --if-not-exists \
    --topic "$name" --partitions "$partitions" "$@"
}
user() {
  "$bin/kafka-configs.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$cfg" --alter \
    --entity-type users --entity-name "$1" --add-config "%s=[password=$2]"
}
acl() {
  principal=$1
  shift
  "$bin/kafka-acls.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$cfg" --add \
    --allow-principal "User:$principal" "$@"
}
`, KafkaAdmin, AdminPasswordEnv, KafkaMechanism)
	b.WriteString("\n# Topics (replication: the brokers' defaults).\n")
	for _, t := range Topics(prefix, partitions) {
		fmt.Fprintf(&b, "topic %s %d", t.Name, t.Partitions)
		for _, k := range slices.Sorted(maps.Keys(t.Config)) {
			fmt.Fprintf(&b, " --config %s=%s", k, t.Config[k])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n# One user per role.\n")
	for _, r := range Roles() {
		fmt.Fprintf(&b, "user %s \"$%s\"\n", r, r.PasswordEnv())
	}
	b.WriteString("\n# Each role's ACLs: literal resources, allow only.\n")
	for _, r := range Roles() {
		// One kafka-acls.sh run per resource, with all its operations.
		type resource struct {
			typ  kmsg.ACLResourceType
			name string
		}
		var order []resource
		ops := map[resource][]string{}
		for _, a := range r.Kafka().ACLs(prefix, group) {
			if !a.Allow || a.Pattern != kmsg.ACLResourcePatternTypeLiteral {
				return "", fmt.Errorf("role %s: ACL %+v is not a literal allow", r, a)
			}
			op, ok := aclOperations[a.Operation]
			if _, known := aclResources[a.Resource]; !ok || !known {
				return "", fmt.Errorf("role %s: ACL %+v has no kafka-acls.sh form", r, a)
			}
			res := resource{a.Resource, a.Name}
			if _, seen := ops[res]; !seen {
				order = append(order, res)
			}
			ops[res] = append(ops[res], "--operation "+op)
		}
		for _, res := range order {
			fmt.Fprintf(&b, "acl %s %s %s %s\n", r, strings.Join(ops[res], " "), aclResources[res.typ], res.name)
		}
	}
	return b.String(), nil
}
