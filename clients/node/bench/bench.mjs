// Benchmark (not a test): JOBS jobs due now, a worker at concurrency 16 with
// a no-op handler, jobs/s from the worker's start to the last ack.
//   npm run build && DQ_URL=http://127.0.0.1:7070 JOBS=20000 node bench/bench.mjs
import { Client, Worker } from "../dist/src/index.js";

const url = process.env.DQ_URL ?? "http://127.0.0.1:7070";
const jobs = Number(process.env.JOBS ?? 20000);
const topic = `bench-node-${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
const client = new Client(url);

for (let i = 0; i < jobs; i += 1000) {
  const n = Math.min(1000, jobs - i);
  const results = await client.enqueueBatch(topic, Array.from({ length: n }, (_, k) => ({ body: { n: i + k } })));
  if (results.some((r) => r instanceof Error)) throw new Error("enqueue refused");
}

const worker = new Worker(client, { concurrency: 16, handleSignals: false });
worker.handle(topic, async () => {});
let acked = 0;
let lastAck = 0;
const ackBatch = client.ackBatch.bind(client);
client.ackBatch = async (items, options) => {
  const r = await ackBatch(items, options);
  acked += r.filter((x) => x === true).length;
  lastAck = performance.now();
  if (acked >= jobs) worker.stop();
  return r;
};
const started = performance.now();
await worker.run();
const secs = (lastAck - started) / 1000;
console.log(`jobs/s: ${Math.round(acked / secs)}`);
client.close();
