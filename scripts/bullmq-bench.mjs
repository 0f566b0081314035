// BullMQ's side of scripts/bench-vs-bullmq.sh: the same drain `dq bench
// drain` runs, with BullMQ's own Queue and Worker, against the Redis at
// 127.0.0.1:PORT. Prints one JSON line with the figures `dq bench drain`
// prints under the same names.
//
//   node bullmq-bench.mjs PORT JOBS WINDOW_FROM_MS WINDOW_TO_MS CONCURRENCY REDIS_PID
//
// As in `dq bench drain`: the consumers start at t0; two producers add the
// jobs in batches of 1000 (addBulk), each due at t0 + a uniform time in the
// window, with a 64-byte body; finished jobs are removed (dq deletes an
// acked job). jobs_per_s counts from the window's start to the last job
// done; lateness is when the processor ran minus the job's due time. CPU per
// job: this Node process (producers and worker together, as `dq bench`'s
// client is not counted on dq's side, it is reported apart) and Redis, from
// /proc.
import { readFileSync } from "node:fs";
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const [port, jobs, a, b, concurrency, redisPid] = process.argv.slice(2).map(Number);
// BullMQ 6 takes its ioredis client constructed (its optional dependency
// is not found from an ES module); the worker's blocking calls need their
// own connection, as BullMQ's guide says.
const client = () => new IORedis({ host: "127.0.0.1", port, maxRetriesPerRequest: null });
const name = "bench";
const body = "x".repeat(64);
const ticks = () => {
  // utime + stime of the Redis process, in clock ticks (100 per second here).
  const f = readFileSync(`/proc/${redisPid}/stat`, "utf8");
  const rest = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return Number(rest[11]) + Number(rest[12]);
};

const queue = new Queue(name, { connection: client() });
await queue.waitUntilReady();
const redis0 = ticks();
const cpu0 = process.cpuUsage();
const t0 = Date.now();
const lateness = [];
let early = 0;
let lastDone = 0;
let finish;
const allDone = new Promise((r) => (finish = r));
const worker = new Worker(
  name,
  async (job) => {
    const late = Date.now() - job.data.due;
    if (late < 0) early += 1;
    lateness.push(late);
  },
  { connection: client(), concurrency },
);
worker.on("completed", () => {
  lastDone = Date.now();
  if (lateness.length >= jobs) finish();
});

const producers = 2;
let next = 0;
const enqStart = Date.now();
await Promise.all(
  Array.from({ length: producers }, async () => {
    while (next < jobs) {
      const from = next;
      next = Math.min(jobs, next + 1000);
      const batch = [];
      for (let i = from; i < next; i++) {
        const due = t0 + a + (b > a ? Math.floor(Math.random() * (b - a + 1)) : 0);
        batch.push({
          name: "j",
          data: { due, body },
          opts: { delay: Math.max(0, due - Date.now()), removeOnComplete: true, removeOnFail: true },
        });
      }
      await queue.addBulk(batch);
    }
  }),
);
const enqueueSeconds = (Date.now() - enqStart) / 1000;
const timeout = setTimeout(() => finish(), b + 120_000);
await allDone;
clearTimeout(timeout);
const cpu = process.cpuUsage(cpu0);
const redisTicks = ticks() - redis0;
await worker.close();
await queue.close();

lateness.sort((x, y) => x - y);
const q = (p) => lateness[Math.min(lateness.length - 1, Math.floor((p / 100) * lateness.length))] ?? null;
const active = (lastDone - t0 - a) / 1000;
const perJob = (us) => Math.round((us / Math.max(1, lateness.length)) * 10) / 10;
console.log(
  JSON.stringify({
    scenario: "drain",
    queue: "bullmq",
    version: JSON.parse(readFileSync(new URL("./node_modules/bullmq/package.json", `file://${process.cwd()}/`))).version,
    jobs,
    window_ms: [a, b],
    concurrency,
    enqueue_seconds: enqueueSeconds,
    seconds: (lastDone - t0) / 1000,
    jobs_per_s: Math.round(lateness.length / Math.max(0.001, active)),
    lateness: { p50_ms: q(50), p99_ms: q(99), max_ms: lateness[lateness.length - 1] ?? null },
    cpu_us_per_job: { client: perJob(cpu.user + cpu.system), store: perJob(redisTicks * 10_000) },
    lost: jobs - lateness.length,
    early,
  }),
);
process.exit(0);
