// Reads Switchyard topics with kafkajs and decodes every record with
// protobufjs from the descriptor set that `switchyard schema export`
// writes. Each record's "message" header names its type; its
// "content-type" header says protobuf or JSON (the processor's
// checkpoints). Prints one JSON object per record, like `switchyard tap`.
//
//   switchyard schema export --out switchyard.binpb
//   npm ci
//   node consume.js --brokers 127.0.0.1:9092 --topics switchyard.routing.events \
//     --descriptor switchyard.binpb [--group my-team] [--count N]
//
// Signals and estimates are gzip-compressed, which kafkajs reads without
// a plugin; routing events are not compressed.
"use strict";

const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");
const protobuf = require("protobufjs");
require("protobufjs/ext/descriptor"); // adds Root.fromDescriptor

function parseArgs(argv) {
  const args = { brokers: "127.0.0.1:9092", topics: "", descriptor: "switchyard.binpb", group: "", count: 0 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (!(key in args)) throw new Error(`unknown flag ${argv[i]}`);
    args[key] = argv[i + 1];
  }
  args.count = Number(args.count) || 0;
  if (!args.topics) throw new Error("--topics is required");
  return args;
}

function header(message, key) {
  const v = message.headers && message.headers[key];
  return v === undefined ? "" : v.toString();
}

// decode turns one record's value into a plain object with the .proto
// field names, every field present, enums by name, and 64-bit integers
// as strings (JavaScript numbers lose precision above 2^53).
function decode(root, message) {
  const contentType = header(message, "content-type");
  const name = header(message, "message");
  if (contentType === "application/json") return JSON.parse(message.value.toString());
  if (contentType !== "application/x-protobuf") throw new Error(`no content-type header`);
  const type = root.lookupType(name);
  return type.toObject(type.decode(message.value), { longs: String, enums: String, bytes: String, defaults: true, arrays: true, oneofs: false });
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const root = protobuf.Root.fromDescriptor(fs.readFileSync(args.descriptor));
  const kafka = new Kafka({ clientId: "switchyard-node-example", brokers: args.brokers.split(","), logLevel: logLevel.ERROR });
  const consumer = kafka.consumer({ groupId: args.group || `switchyard-node-${process.pid}` });
  await consumer.connect();
  for (const topic of args.topics.split(",")) await consumer.subscribe({ topic, fromBeginning: true });
  let seen = 0;
  let done;
  const finished = new Promise((resolve) => (done = resolve));
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      let out;
      try {
        out = decode(root, message);
      } catch (e) {
        out = { _error: String(e.message || e) };
      }
      const headers = {};
      for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v.toString();
      out._kafka = { topic, partition, offset: Number(message.offset), timestamp: new Date(Number(message.timestamp)).toISOString(),
        key: message.key ? message.key.toString() : "", headers };
      process.stdout.write(JSON.stringify(out) + "\n");
      seen++;
      if (args.count > 0 && seen >= args.count) done();
    },
  });
  if (args.count > 0) {
    await finished;
    await consumer.disconnect();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
