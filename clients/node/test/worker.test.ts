import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";

import { Client, Dead, DqError, RetryLater, Worker, type Lease } from "../src/index.js";
import { DqServer, nodeDir, sleep, stores, unique, waitFor } from "./helpers.js";

const quiet = { onError: () => {} };

for (const store of stores) {
  describe(`worker (${store.name} store)`, () => {
    let dq: DqServer;
    let client: Client;
    before(async () => {
      dq = await DqServer.start(store);
      client = new Client(dq.url, { timeoutMs: 10_000 });
    });
    after(async () => {
      client?.close();
      await dq?.stop();
    });

    /** The ack:batch calls and single acks this server has answered 200 (its /metrics). */
    async function ackCalls(): Promise<{ batches: number; singles: number }> {
      const text = await (await fetch(`${dq.url}/metrics`)).text();
      const count = (route: string): number => {
        const prefix = `dq_http_request_duration_seconds_count{method="POST",route="${route}",status="200"} `;
        const line = text.split("\n").find((l) => l.startsWith(prefix));
        return line === undefined ? 0 : Number(line.slice(prefix.length));
      };
      return { batches: count("/v1/ack:batch"), singles: count("/v1/topics/{topic}/jobs/{id}/ack") };
    }

    async function gone(topic: string, id: string): Promise<boolean> {
      try {
        await client.get(topic, id);
        return false;
      } catch (e) {
        if (e instanceof DqError && e.code === "job_not_found") return true;
        throw e;
      }
    }

    test("a worker of 4 runs 1,000 jobs due over 2 s: none early, none twice, none lost", async () => {
      const topic = unique("w.thousand");
      const start = Date.now() + 1000;
      const ids = Array.from({ length: 1000 }, (_, i) => `job-${i}`);
      const r = await client.enqueueBatch(
        topic,
        ids.map((id, i) => ({ id, body: { i }, dueAtMs: start + Math.floor(i * 2) })),
      );
      assert.ok(r.every((x) => !(x instanceof DqError) && x.created));
      const seen = new Map<string, number>();
      const early: string[] = [];
      let running = 0;
      let maxRunning = 0;
      const callsBefore = await ackCalls();
      const worker = new Worker(client, { concurrency: 4, leaseMs: 10_000, ...quiet });
      worker.handle(topic, async (job: Lease) => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        const now = Date.now();
        if (now < job.dueAtMs) early.push(`${job.id} ${job.dueAtMs - now} ms early`);
        seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
        await new Promise((res) => setImmediate(res));
        running--;
      });
      const ac = new AbortController();
      const run = worker.run(ac.signal);
      await waitFor("1000 jobs handled", () => seen.size === 1000, 30_000);
      ac.abort();
      await run;
      assert.deepEqual(early, []);
      assert.deepEqual([...seen.entries()].filter(([, n]) => n > 1), [], "no job twice");
      assert.deepEqual(ids.filter((id) => !seen.has(id)), [], "no job lost");
      assert.ok(maxRunning <= 4, `at most 4 handlers at once (saw ${maxRunning})`);
      assert.equal(worker.stats.done, 1000);
      const info = await client.getTopic(topic);
      assert.equal(info.stats.counters.acked, 1000);
      assert.equal(info.stats.reserved + info.stats.ready + info.stats.scheduled, 0);
      // The acks went in batches (of what was done while the call before was
      // in flight), none one by one.
      const calls = await ackCalls();
      const batches = calls.batches - callsBefore.batches;
      const singles = calls.singles - callsBefore.singles;
      assert.ok(batches > 0 && batches < 1000 && singles === 0, `1000 acks in ${batches} ack:batch calls and ${singles} single acks`);
    });

    test("a throwing handler: retried per the topic's policy, then dead; Dead and RetryLater", async () => {
      const topic = unique("w.fail");
      await client.configureTopic(topic, { maxAttempts: 3, retry: { fixedMs: 50 } });
      await client.enqueue(topic, { kind: "fail" }, { id: "fail" });
      await client.enqueue(topic, { kind: "dead" }, { id: "dead" });
      await client.enqueue(topic, { kind: "later" }, { id: "later" });
      const calls: Record<string, number[]> = { fail: [], dead: [], later: [] };
      let laterAt = 0;
      let laterAgainAt = 0;
      const worker = new Worker(client, { concurrency: 4, leaseMs: 5000, waitMs: 200, ...quiet });
      worker.handle(topic, async (job) => {
        const kind = (job.body as { kind: string }).kind;
        calls[kind]!.push(job.attempt);
        if (kind === "fail") throw new Error(`boom ${job.attempt}`);
        if (kind === "dead") throw new Dead("no such order");
        if (calls.later!.length === 1) {
          laterAt = Date.now();
          throw new RetryLater(300);
        }
        laterAgainAt = Date.now();
      });
      const ac = new AbortController();
      const run = worker.run(ac.signal);
      await waitFor("retries and dead letters", async () => (await client.getTopic(topic)).stats.dead === 2 && laterAgainAt > 0, 15_000);
      ac.abort();
      await run;
      assert.deepEqual(calls.fail, [1, 2, 3]);
      assert.deepEqual(calls.dead, [1]);
      assert.equal(calls.later!.length, 2);
      assert.ok(laterAgainAt - laterAt >= 280, `released for ${laterAgainAt - laterAt} ms`);
      const fail = await client.get(topic, "fail");
      assert.equal(fail.state, "dead");
      assert.equal(fail.lastError, "boom 3");
      assert.equal(fail.attempts, 3);
      const dead = await client.get(topic, "dead");
      assert.equal(dead.state, "dead");
      assert.equal(dead.lastError, "no such order");
      assert.equal(dead.attempts, 1);
      assert.ok(await gone(topic, "later"));
      assert.deepEqual(
        { done: worker.stats.done, failed: worker.stats.failed, dead: worker.stats.dead, retried: worker.stats.retried },
        { done: 1, failed: 3, dead: 1, retried: 1 },
      );
    });

    test("a handler slower than the lease: the lease is extended, the job not handed to another worker", async () => {
      const topic = unique("w.slow");
      await client.enqueue(topic, "slow", { id: "slow" });
      const calls: string[] = [];
      const mk = (name: string): Worker =>
        new Worker(client, { concurrency: 2, leaseMs: 900, waitMs: 200, ...quiet }).handle(topic, async () => {
          calls.push(name);
          await sleep(3000);
        });
      const w1 = mk("w1");
      const w2 = mk("w2");
      const ac = new AbortController();
      const runs = Promise.all([w1.run(ac.signal), w2.run(ac.signal)]);
      await waitFor("the slow job acked", () => gone(topic, "slow"), 15_000, 100);
      await sleep(300); // a second delivery would show now
      ac.abort();
      await runs;
      assert.equal(calls.length, 1, `one delivery, not ${calls.join(",")}`);
      const info = await client.getTopic(topic);
      assert.equal(info.stats.counters.expired, 0);
      assert.equal(info.stats.counters.failed, 0);
      assert.equal(info.stats.counters.acked, 1);
    });

    test("stop mid-run (abort signal): in-flight jobs finish and are acked, nothing left reserved", async () => {
      const topic = unique("w.stop");
      const ids = Array.from({ length: 20 }, (_, i) => `s${i}`);
      await client.enqueueBatch(topic, ids.map((id) => ({ id, body: id })));
      const started: string[] = [];
      const finished: string[] = [];
      const worker = new Worker(client, { concurrency: 4, leaseMs: 10_000, graceMs: 5000, waitMs: 200, ...quiet });
      worker.handle(topic, async (job) => {
        started.push(job.id);
        await sleep(400);
        finished.push(job.id);
      });
      const ac = new AbortController();
      const run = worker.run(ac.signal);
      await waitFor("4 handlers running", () => started.length >= 4);
      ac.abort();
      await run;
      assert.ok(started.length >= 4 && started.length < 20, `started ${started.length}`);
      assert.deepEqual([...finished].sort(), [...started].sort(), "every started handler finished");
      for (const id of started) assert.ok(await gone(topic, id), `${id} acked`);
      const info = await client.getTopic(topic);
      assert.equal(info.stats.reserved, 0);
      assert.equal(info.stats.ready + info.stats.scheduled, 20 - started.length);
      assert.equal(info.stats.counters.acked, started.length);
      // worker.stop() works too, and the worker can run again
      const again = worker.run();
      await waitFor("more started", () => started.length > finished.length);
      worker.stop();
      await again;
      assert.equal((await client.getTopic(topic)).stats.reserved, 0);
      assert.deepEqual([...finished].sort(), [...started].sort());
    });

    test("a stop while a reserve waits: the jobs it returns are given back, not started", async () => {
      const topic = unique("w.handback");
      const own = new Client(dq.url);
      let reserving: () => void = () => {};
      const inReserve = new Promise<void>((r) => (reserving = r));
      const reserve = own.reserve.bind(own);
      own.reserve = (topics, options) => {
        const p = reserve(topics, options);
        reserving();
        return p;
      };
      const started: string[] = [];
      const worker = new Worker(own, { concurrency: 4, leaseMs: 10_000, waitMs: 5000, ...quiet });
      worker.handle(topic, async (job) => {
        started.push(job.id);
      });
      const ac = new AbortController();
      await client.configureTopic(topic, {});
      const run = worker.run(ac.signal);
      await inReserve;
      ac.abort();
      await client.enqueue(topic, "x", { id: "hb" }); // wakes the waiting reserve
      await run;
      own.close();
      assert.deepEqual(started, []);
      assert.equal(worker.stats.handedBack, 1);
      const job = await client.get(topic, "hb");
      assert.equal(job.state, "ready");
      const info = await client.getTopic(topic);
      assert.equal(info.stats.reserved, 0);
    });

    test("SIGTERM to a worker process: in-flight jobs acked, nothing left reserved, signal listeners removed", async () => {
      const topic = unique("w.sigterm");
      const ids = Array.from({ length: 16 }, (_, i) => `t${i}`);
      await client.enqueueBatch(topic, ids.map((id) => ({ id, body: id })));
      const script = path.join(nodeDir, "dist/test/fixtures/sigterm-worker.js");
      const child = spawn(process.execPath, [script, dq.url, topic, "600"], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
      try {
        await waitFor("the child's handlers to start", () => (out.match(/^started /gm) ?? []).length >= 2, 15_000);
        child.kill("SIGTERM");
        const code = await Promise.race([exited, sleep(15_000).then(() => "timeout" as const)]);
        assert.equal(code, 0, `child exit: ${code}; output:\n${out}`);
      } finally {
        if (child.exitCode === null) child.kill("SIGKILL");
      }
      const started = [...out.matchAll(/^started (\S+)$/gm)].map((m) => m[1]!);
      const done = [...out.matchAll(/^done (\S+)$/gm)].map((m) => m[1]!);
      assert.ok(started.length >= 2 && started.length < 16, out);
      assert.deepEqual([...done].sort(), [...started].sort(), "in-flight handlers finished");
      assert.match(out, /^stopped 0 /m, "SIGTERM/SIGINT listeners removed after run()");
      for (const id of started) assert.ok(await gone(topic, id), `${id} acked`);
      const info = await client.getTopic(topic);
      assert.equal(info.stats.reserved, 0);
      assert.equal(info.stats.ready + info.stats.scheduled, 16 - started.length);
    });

    test("dq restarts mid-run: the worker reconnects and goes on, every job done", async () => {
      const topic = unique("w.restart");
      const n = 200;
      const start = Date.now() + 500;
      await client.enqueueBatch(
        topic,
        Array.from({ length: n }, (_, i) => ({ id: `r${i}`, body: i, dueAtMs: start + i * 15 })),
      );
      const seen = new Set<string>();
      const worker = new Worker(client, { concurrency: 4, leaseMs: 2000, waitMs: 200, ...quiet });
      worker.handle(topic, async (job) => {
        await sleep(2);
        seen.add(job.id);
      });
      const ac = new AbortController();
      const run = worker.run(ac.signal);
      try {
        await waitFor("some jobs done", () => seen.size >= 40, 15_000);
        await dq.restart();
        const before = seen.size;
        await waitFor("jobs done after the restart", () => seen.size > before, 20_000);
        await waitFor("every job done", () => seen.size === n, 40_000, 50);
        await waitFor(
          "every job acked",
          async () => {
            const s = (await client.getTopic(topic)).stats;
            return s.ready + s.scheduled + s.reserved === 0;
          },
          20_000,
          100,
        );
      } finally {
        ac.abort();
        await run;
      }
      assert.ok(worker.stats.reserveErrors > 0, "the worker saw dq go away");
      const s = (await client.getTopic(topic)).stats;
      assert.equal(s.dead, 0);
    });
  });
}
