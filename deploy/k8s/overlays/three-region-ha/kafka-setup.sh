#!/bin/sh
# Generated from services/brokers/roles (roles.go, deploy.go) by
# `go test ./services/switchyard -run TestBrokerConfigsGenerated -update-broker-configs`: do not edit.
#
# Creates the Switchyard topics, one SCRAM user per role and each role's
# least-privilege ACLs (docs/security.md#least-privilege) on Apache Kafka,
# as the super user admin over SASL PLAIN. Needs KAFKA_BOOTSTRAP (the
# brokers' internal listener) and the passwords below in the environment.
set -eu
: "${KAFKA_BOOTSTRAP:?}" "${SWITCHYARD_KAFKA_ADMIN_PASSWORD:?}" "${SWITCHYARD_AGENT_PASSWORD:?}" "${SWITCHYARD_PROCESSOR_PASSWORD:?}" "${SWITCHYARD_OPTIMIZER_PASSWORD:?}" "${SWITCHYARD_GATEWAY_PASSWORD:?}" "${SWITCHYARD_READER_PASSWORD:?}"
bin=/opt/kafka/bin
umask 077
cfg=$(mktemp)
trap 'rm -f "$cfg"' EXIT
cat >"$cfg" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="${SWITCHYARD_KAFKA_ADMIN_PASSWORD}";
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
    --entity-type users --entity-name "$1" --add-config "SCRAM-SHA-512=[password=$2]"
}
acl() {
  principal=$1
  shift
  "$bin/kafka-acls.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$cfg" --add \
    --allow-principal "User:$principal" "$@"
}

# Topics (replication: the brokers' defaults).
topic switchyard.engine.signals 3 --config cleanup.policy=delete --config retention.ms=604800000
topic switchyard.routing.events 3 --config cleanup.policy=delete --config retention.ms=604800000
topic switchyard.routing.arrivals 3 --config cleanup.policy=delete --config retention.ms=604800000
topic switchyard.estimates 1 --config cleanup.policy=compact
topic switchyard.deadletter 3 --config cleanup.policy=delete --config retention.ms=2592000000
topic switchyard.kv.events 3 --config cleanup.policy=delete --config retention.ms=604800000
topic switchyard.processor.checkpoints 1 --config cleanup.policy=compact
topic switchyard.processor.partials 1 --config cleanup.policy=compact
topic switchyard.settings 1

# One user per role.
user agent "$SWITCHYARD_AGENT_PASSWORD"
user processor "$SWITCHYARD_PROCESSOR_PASSWORD"
user optimizer "$SWITCHYARD_OPTIMIZER_PASSWORD"
user gateway "$SWITCHYARD_GATEWAY_PASSWORD"
user reader "$SWITCHYARD_READER_PASSWORD"

# Each role's ACLs: literal resources, allow only.
acl agent --operation Write --operation Describe --topic switchyard.engine.signals
acl agent --operation Write --operation Describe --topic switchyard.kv.events
acl agent --operation Write --operation Describe --topic switchyard.deadletter
acl processor --operation Read --operation Describe --topic switchyard.engine.signals
acl processor --operation Read --operation Describe --topic switchyard.routing.events
acl processor --operation Read --operation Describe --topic switchyard.routing.arrivals
acl processor --operation Write --operation Describe --topic switchyard.estimates
acl processor --operation Write --operation Describe --topic switchyard.deadletter
acl processor --operation Describe --topic switchyard.kv.events
acl processor --operation Read --operation Write --operation Describe --topic switchyard.processor.checkpoints
acl processor --operation Write --operation Describe --topic switchyard.settings
acl processor --operation Read --operation Write --operation Describe --topic switchyard.processor.partials
acl processor --operation Read --group switchyard-processor
acl optimizer --operation Read --operation Describe --topic switchyard.estimates
acl optimizer --operation Write --operation Describe --topic switchyard.deadletter
acl optimizer --operation Write --operation Describe --topic switchyard.settings
acl gateway --operation Write --operation Describe --topic switchyard.routing.events
acl gateway --operation Read --operation Describe --topic switchyard.engine.signals
acl gateway --operation Write --operation Describe --topic switchyard.routing.arrivals
acl reader --operation Read --operation Describe --topic switchyard.engine.signals
acl reader --operation Read --operation Describe --topic switchyard.routing.events
acl reader --operation Read --operation Describe --topic switchyard.routing.arrivals
acl reader --operation Read --operation Describe --topic switchyard.estimates
acl reader --operation Read --operation Describe --topic switchyard.deadletter
acl reader --operation Read --operation Describe --topic switchyard.kv.events
acl reader --operation Read --operation Describe --topic switchyard.processor.checkpoints
acl reader --operation Read --operation Describe --topic switchyard.settings
acl reader --operation Read --operation Describe --topic switchyard.processor.partials
