// Reads Switchyard topics with kafkajs and decodes every record with
// protobufjs from the descriptor set that `switchyard schema export`
// writes. Each record's "message" header names its type; its
// "content-type" header says protobuf or JSON (the processor's
// checkpoints, the settings records). Prints one JSON object per record,
// like `switchyard tap`.
//
//   switchyard schema export --out switchyard.binpb
//   npm ci
//   node consume.js --brokers 127.0.0.1:9092 --topics switchyard.routing.events \
//     --descriptor switchyard.binpb [--group my-team] [--count N] [--to-end]
//
// --to-end reads each partition up to its end when the example starts and
// exits 0, printing "consume: N records from TOPIC" per topic on stderr.
// --count N exits 0 after N records. Without either it follows the topics
// until interrupted.
//
// It fails loudly: exit 1, with the reason on stderr, on a topic that does
// not exist, a broker it cannot reach, a record it cannot decode (the
// record's topic, partition and offset are named), or a consumer that
// crashes (such as a batch compressed with a codec kafkajs lacks).
// Every Switchyard topic is gzip-compressed or not compressed, which
// kafkajs reads without a plugin (docs/topics.md).
"use strict";

const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");
const protobuf = require("protobufjs");
require("protobufjs/ext/descriptor"); // adds Root.fromDescriptor

const booleans = new Set(["to-end"]);

function parseArgs(argv) {
  const args = { brokers: "127.0.0.1:9092", topics: "", descriptor: "switchyard.binpb", group: "", count: "0", "to-end": false };
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, "");
    if (!argv[i].startsWith("--") || !(key in args)) throw new Error(`unknown flag ${argv[i]}`);
    if (booleans.has(key)) {
      args[key] = true;
      continue;
    }
    if (i + 1 >= argv.length) throw new Error(`flag ${argv[i]} needs a value`);
    args[key] = argv[++i];
  }
  const count = Number(args.count);
  if (!Number.isInteger(count) || count < 0) throw new Error(`--count ${args.count}: want a whole number`);
  args.count = count;
  args.topics = args.topics.split(",").filter((t) => t !== "");
  if (args.topics.length === 0) throw new Error("--topics is required");
  return args;
}

function header(message, key) {
  const v = message.headers && message.headers[key];
  return v === undefined ? "" : v.toString();
}

// decode turns one record's value into a plain object with the .proto
// field names, every field present, enums by name, and 64-bit integers
// as strings (JavaScript numbers lose precision above 2^53). A record of
// a content type that is neither protobuf nor JSON (the partitioned
// processor's internal partials) is returned as base64 with its type.
function decode(root, message) {
  const contentType = header(message, "content-type");
  const name = header(message, "message");
  if (contentType === "application/json") return JSON.parse(message.value.toString());
  if (contentType === "application/x-protobuf") {
    const type = root.lookupType(name);
    return type.toObject(type.decode(message.value), { longs: String, enums: String, bytes: String, defaults: true, arrays: true, oneofs: false });
  }
  if (contentType === "") throw new Error("no content-type header");
  return { _content_type: contentType, _message: name, _value_base64: message.value ? message.value.toString("base64") : "" };
}

// endOffsets returns, per topic and partition, the offset the partition
// ends at now, for the partitions that hold records.
async function endOffsets(admin, topics) {
  const out = {};
  for (const topic of topics) {
    out[topic] = {};
    for (const p of await admin.fetchTopicOffsets(topic)) {
      if (BigInt(p.high) > BigInt(p.low)) out[topic][p.partition] = BigInt(p.high);
    }
  }
  return out;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const root = protobuf.Root.fromDescriptor(fs.readFileSync(args.descriptor));
  const kafka = new Kafka({ clientId: "switchyard-node-example", brokers: args.brokers.split(","), logLevel: logLevel.ERROR });

  const admin = kafka.admin();
  await admin.connect();
  const existing = new Set(await admin.listTopics());
  const missing = args.topics.filter((t) => !existing.has(t));
  if (missing.length > 0) {
    await admin.disconnect();
    throw new Error(`no such topic: ${missing.join(", ")}`);
  }
  const targets = args["to-end"] ? await endOffsets(admin, args.topics) : null;
  await admin.disconnect();

  const counts = Object.fromEntries(args.topics.map((t) => [t, 0]));
  const summary = () => {
    for (const [t, n] of Object.entries(counts)) process.stderr.write(`consume: ${n} records from ${t}\n`);
  };
  const remaining = () => (targets ? Object.values(targets).reduce((n, ps) => n + Object.keys(ps).length, 0) : 1);
  if (targets && remaining() === 0) {
    summary();
    return;
  }

  const consumer = kafka.consumer({ groupId: args.group || `switchyard-node-${process.pid}`, allowAutoTopicCreation: false });
  let finish;
  let done = false; // set once finished: later batches are dropped
  const finished = new Promise((resolve, reject) => (finish = { resolve, reject }));
  consumer.on(consumer.events.CRASH, ({ payload }) => finish.reject(payload.error));
  await consumer.connect();
  await consumer.subscribe({ topics: args.topics, fromBeginning: true });

  let seen = 0;
  await consumer.run({
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      const { topic, partition } = batch;
      for (const message of batch.messages) {
        if (done) return;
        let out;
        try {
          out = decode(root, message);
        } catch (e) {
          done = true;
          return finish.reject(new Error(`cannot decode ${topic}/${partition} offset ${message.offset}: ${e.message || e}`));
        }
        const headers = {};
        for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v === undefined ? "" : v.toString();
        out._kafka = { topic, partition, offset: Number(message.offset), timestamp: new Date(Number(message.timestamp)).toISOString(),
          key: message.key ? message.key.toString() : "", headers };
        process.stdout.write(JSON.stringify(out) + "\n");
        counts[topic]++;
        seen++;
        resolveOffset(message.offset);
        if (args.count > 0 && seen >= args.count) {
          done = true;
          return finish.resolve();
        }
      }
      await heartbeat();
      const end = targets && targets[topic][partition];
      if (end !== undefined && BigInt(batch.lastOffset()) + 1n >= end) {
        delete targets[topic][partition];
        if (remaining() === 0) finish.resolve();
      }
    },
  });
  try {
    await finished; // without --count or --to-end: never, unless the consumer crashes
  } finally {
    done = true;
    await consumer.disconnect();
  }
  summary();
}

// exit leaves once stdout has taken every line (kafkajs keeps timers that
// would hold the process open after disconnecting).
const exit = (code) => process.stdout.write("", () => process.exit(code));
main().then(
  () => exit(0),
  (e) => {
    process.stderr.write(`consume: ${e && e.message ? e.message : e}\n`);
    exit(1);
  },
);
