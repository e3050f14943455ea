// Package kvevents reads vLLM's KV-cache events (the msgpack batches an
// engine started with --kv-events-config publishes on a ZMQ PUB socket)
// and relays them to Kafka: ParseMessage decodes one message in either
// of vLLM's encodings, Tracker checks an engine's sequence numbers, and
// Relay follows engines (with their replay sockets) and publishes one
// schemas.KVEventBatch per batch to the kv.events topic, keyed by engine,
// with resync records where an engine's view must start afresh.
// `switchyard kvevents` wires its flags to Relay (docs/kvevents.md).
package kvevents
