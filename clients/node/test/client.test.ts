import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import * as http from "node:http";
import { tmpdir } from "node:os";
import * as path from "node:path";
import * as net from "node:net";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";

import { Client, DqError, RawJson, TransportError, type Lease } from "../src/index.js";
import { DqServer, freePort, stores, unique } from "./helpers.js";

async function rejectsWith(p: Promise<unknown>, status: number, code: string): Promise<DqError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof DqError, `expected a DqError, got ${String(e)}`);
    assert.equal(e.code, code, `code (message: ${e.message})`);
    assert.equal(e.status, status);
    assert.ok(e.message.length > 0);
    return e;
  }
  assert.fail(`expected DqError ${status} ${code}, the call succeeded`);
}

async function reserveOne(client: Client, topic: string, leaseMs = 30_000): Promise<Lease> {
  const jobs = await client.reserve(topic, { max: 1, waitMs: 2000, leaseMs });
  assert.equal(jobs.length, 1);
  return jobs[0]!;
}

for (const store of stores) {
  describe(`client (${store.name} store)`, () => {
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

    test("enqueue, get, and bodies round-trip", async () => {
      const topic = unique("c.enq");
      const body = { order: 42, nested: { list: [1, "two", null, true], "ü": "ß\n\"" }, f: 1.5 };
      const r = await client.enqueue(topic, body, { id: "order-42", delayMs: 60_000, priority: 7, key: "cust-1" });
      assert.equal(r.id, "order-42");
      assert.equal(r.created, true);
      assert.equal(r.replaced, false);
      assert.equal(r.state, "scheduled");
      assert.ok(r.dueAtMs! >= Date.now() + 50_000);
      const job = await client.get(topic, "order-42");
      assert.equal(job.topic, topic);
      assert.equal(job.id, "order-42");
      assert.equal(job.state, "scheduled");
      assert.equal(job.priority, 7);
      assert.equal(job.attempts, 0);
      assert.equal(job.key, "cust-1");
      assert.deepEqual(job.body, body);
      assert.equal(job.bodyText, JSON.stringify(body));
      assert.equal(job.dueAtMs, r.dueAtMs);

      // the same id again: nothing changes
      const again = await client.enqueue(topic, { other: true }, { id: "order-42" });
      assert.equal(again.created, false);
      assert.deepEqual((await client.get(topic, "order-42")).body, body);
      // replace rewrites a waiting job
      const rep = await client.enqueue(topic, { other: true }, { id: "order-42", replace: true, dueAtMs: Date.now() + 5000 });
      assert.equal(rep.replaced, true);
      assert.deepEqual((await client.get(topic, "order-42")).body, { other: true });

      // every JSON shape, generated ids
      for (const b of ["text", 0, -1.25, true, null, [], {}, [{ a: [] }], "emoji 🚀 \u0000 \\"]) {
        const e = await client.enqueue(topic, b);
        assert.equal(e.created, true);
        const g = await client.get(topic, e.id);
        assert.deepEqual(g.body, b);
        assert.equal(g.bodyText, JSON.stringify(b));
      }
    });

    test("raw JSON bodies keep their exact text; JS numbers lose precision above 2^53", async () => {
      const topic = unique("c.raw");
      const text = '{ "n": 9007199254740993, "big": 18446744073709551617, "e": 1e400, "z": -0, "k": "\\u00e9" }';
      const e = await client.enqueue(topic, new RawJson(text), { id: "raw" });
      const g = await client.get(topic, e.id);
      assert.equal(g.bodyText, text, "the body's text comes back exactly");
      const parsed = g.body as Record<string, number>;
      assert.equal(parsed.n, 9007199254740992, "JSON.parse rounds 2^53 + 1 to 2^53");
      assert.equal(parsed.e, Infinity);
      // a JS number above 2^53 is already rounded before it is sent
      const lossy = await client.enqueue(topic, { n: 2 ** 53 + 1 });
      assert.equal((await client.get(topic, lossy.id)).bodyText, '{"n":9007199254740992}');
      // the exact text comes through reserve too
      const j = await reserveOne(client, topic);
      assert.ok([text, '{"n":9007199254740992}'].includes(j.bodyText!));
      await assert.rejects(async () => new RawJson("{not json"), SyntaxError);
    });

    test("bytes bodies", async () => {
      const topic = unique("c.bytes");
      const bytes = Buffer.from([0, 1, 2, 250, 255, 10, 13]);
      const e = await client.enqueue(topic, bytes);
      const g = await client.get(topic, e.id);
      assert.deepEqual(g.bodyBytes, bytes);
      assert.equal(g.body, undefined);
      const j = await reserveOne(client, topic);
      assert.deepEqual(j.bodyBytes, bytes);
      await client.ack(topic, j.id, j.token);
    });

    test("enqueue errors", async () => {
      const topic = unique("c.err");
      await rejectsWith(client.enqueue(topic, 1, { delayMs: -1 }), 400, "invalid_delay");
      await rejectsWith(client.enqueue(topic, 1, { delayMs: 1, dueAtMs: Date.now() }), 400, "invalid_delay");
      await rejectsWith(client.enqueue("bad topic!", 1), 400, "invalid_topic");
      await rejectsWith(client.enqueue(topic, 1, { id: "has space" }), 400, "invalid_id");
      await rejectsWith(client.enqueue(topic, 1, { maxAttempts: 0 }), 400, "invalid_max_attempts");
      await rejectsWith(client.enqueue(topic, 1, { leaseMs: 5 }), 400, "invalid_lease");
      await rejectsWith(client.enqueue(topic, 1, { key: "a b" }), 400, "invalid_key");
      await rejectsWith(client.enqueue(topic, 1, { retry: { delaysMs: [] } }), 400, "invalid_retry");
    });

    test("enqueue options: dedup window, retry, lease, max attempts", async () => {
      const topic = unique("c.opts");
      await client.enqueue(topic, 1, { id: "d", dedupWindowMs: 60_000, maxAttempts: 3, leaseMs: 5000, retry: { fixedMs: 100 } });
      const g = await client.get(topic, "d");
      assert.equal(g.maxAttempts, 3);
      assert.equal(g.leaseMs, 5000);
      await client.cancel(topic, "d");
      const again = await client.enqueue(topic, 1, { id: "d" });
      assert.equal(again.created, false);
      assert.equal(again.deduplicated, true);
      await client.enqueue(topic, 1, { id: "d2", dedupMs: 60_000 });
      await client.cancel(topic, "d2");
      assert.equal((await client.enqueue(topic, 1, { id: "d2" })).deduplicated, true);
    });

    test("enqueueBatch: a result per job, refusals typed", async () => {
      const topic = unique("c.batch");
      const r = await client.enqueueBatch(topic, [
        { body: { a: 1 }, id: "b1" },
        { body: 2, delayMs: -5 },
        { body: new RawJson("[1, 2 ]"), id: "b3", priority: 1 },
        { body: Buffer.from("xyz"), id: "b4" },
        { body: 3, id: "b1" },
      ]);
      assert.equal(r.length, 5);
      assert.ok(!(r[0] instanceof DqError) && r[0]!.created);
      assert.ok(r[1] instanceof DqError);
      assert.equal((r[1] as DqError).code, "invalid_delay");
      assert.equal((r[1] as DqError).status, 400);
      assert.ok(!(r[2] instanceof DqError) && r[2]!.created);
      assert.ok(!(r[4] instanceof DqError) && r[4]!.created === false);
      assert.equal((await client.get(topic, "b3")).bodyText, "[1, 2 ]");
      assert.equal((await client.get(topic, "b4")).bodyBytes!.toString(), "xyz");
      await rejectsWith(client.enqueueBatch(topic, []), 400, "invalid_batch");
    });

    test("get, cancel, reschedule and their errors", async () => {
      const topic = unique("c.jobs");
      await rejectsWith(client.get(topic, "nope"), 404, "job_not_found");
      await client.enqueue(topic, "x", { id: "j", delayMs: 60_000 });
      const later = await client.reschedule(topic, "j", { delayMs: 120_000 });
      assert.equal(later.id, "j");
      assert.ok(later.dueAtMs > Date.now() + 100_000);
      const at = Date.now() + 500_000;
      assert.equal((await client.reschedule(topic, "j", { dueAtMs: at })).dueAtMs, at);
      assert.equal((await client.reschedule(topic, "j", { delayMs: 0 })).id, "j");
      const leased = await reserveOne(client, topic);
      await rejectsWith(client.reschedule(topic, "j", { delayMs: 10 }), 409, "not_in_state");
      const c = await client.cancel(topic, "j");
      assert.deepEqual(c, { id: "j", cancelled: true, state: "reserved" });
      await rejectsWith(client.cancel(topic, "j"), 404, "job_not_found");
      await rejectsWith(client.ack(topic, "j", leased.token), 404, "job_not_found");
      await rejectsWith(client.reschedule(topic, "nope", { delayMs: 1 }), 404, "job_not_found");
      await rejectsWith(client.reschedule(topic, "j", { delayMs: -1 }), 400, "invalid_delay");
    });

    test("reserve, ack, nack, touch, release and their errors", async () => {
      const topic = unique("c.lease");
      await client.configureTopic(topic, { maxAttempts: 5, retry: { fixedMs: 60_000 } });
      const due = Date.now();
      await client.enqueue(topic, { n: 1 }, { id: "a", priority: 1 });
      await client.enqueue(topic, { n: 2 }, { id: "b", priority: 2 });
      await client.enqueue(topic, { n: 3 }, { id: "c", priority: 3 });
      await client.enqueue(topic, { n: 4 }, { id: "d", priority: 4 });
      const jobs = await client.reserve([topic], { max: 10, leaseMs: 5000, waitMs: 1000 });
      assert.deepEqual(jobs.map((j) => j.id), ["a", "b", "c", "d"]);
      const [a, b, c, d] = jobs as [Lease, Lease, Lease, Lease];
      assert.equal(a.topic, topic);
      assert.equal(a.attempt, 1);
      assert.ok(a.token.length > 0);
      assert.ok(a.dueAtMs >= due - 1000);
      assert.ok(a.leaseDeadlineMs > Date.now() + 3000);
      assert.deepEqual(a.body, { n: 1 });
      assert.equal(a.bodyText, '{"n":1}');
      assert.equal(a.priority, 1);

      // nothing more due: an empty answer after the wait
      const t0 = Date.now();
      assert.deepEqual(await client.reserve(topic, { waitMs: 300 }), []);
      assert.ok(Date.now() - t0 >= 250);

      // touch
      const deadline = await client.touch(topic, a.id, a.token, { leaseMs: 20_000 });
      assert.ok(deadline > Date.now() + 15_000);
      await rejectsWith(client.touch(topic, a.id, "wrong"), 409, "lease_mismatch");
      await rejectsWith(client.touch(topic, a.id, a.token, { leaseMs: 1 }), 400, "invalid_lease");
      // ack
      await rejectsWith(client.ack(topic, a.id, "wrong"), 409, "lease_mismatch");
      await client.ack(topic, a.id, a.token);
      await rejectsWith(client.get(topic, a.id), 404, "job_not_found");
      await rejectsWith(client.ack(topic, a.id, a.token), 404, "job_not_found");
      // nack: retried after retryInMs
      const n = await client.nack(topic, b.id, b.token, { error: "boom", retryInMs: 30_000 });
      assert.equal(n.state, "scheduled");
      assert.ok(n.dueAtMs! > Date.now() + 20_000);
      const gb = await client.get(topic, b.id);
      assert.equal(gb.lastError, "boom");
      assert.equal(gb.errors?.[0]?.attempt, 1);
      assert.equal(gb.errors?.[0]?.error, "boom");
      assert.ok((gb.errors?.[0]?.atMs ?? 0) > 0);
      assert.equal(gb.attempts, 1);
      await rejectsWith(client.nack(topic, b.id, b.token), 409, "lease_mismatch");
      // nack dead
      const nd = await client.nack(topic, c.id, c.token, { error: "bad", dead: true });
      assert.equal(nd.state, "dead");
      await rejectsWith(client.ack(topic, c.id, c.token), 409, "not_in_state");
      // release: not counted
      const rel = await client.release(topic, d.id, d.token, { delayMs: 0 });
      assert.equal(rel.id, d.id);
      assert.ok(["ready", "scheduled"].includes(rel.state));
      await rejectsWith(client.release(topic, d.id, d.token), 409, "lease_mismatch");
      const d2 = await reserveOne(client, topic);
      assert.equal(d2.id, "d");
      assert.equal(d2.attempt, 1, "a release does not count the attempt");
      await client.ack(topic, d2.id, d2.token);

      // bad reserves
      await rejectsWith(client.reserve("bad topic!"), 400, "invalid_topic");
      await rejectsWith(client.reserve(topic, { max: 0 }), 400, "invalid_max");
      await rejectsWith(client.reserve([], {}), 400, "invalid_topics");
    });

    test("ackBatch, nackBatch, touchBatch", async () => {
      const topic = unique("c.batches");
      await client.configureTopic(topic, { retry: { fixedMs: 60_000 } });
      await client.enqueueBatch(topic, Array.from({ length: 6 }, (_, i) => ({ body: i, id: `j${i}` })));
      const jobs = await client.reserve(topic, { max: 6, waitMs: 1000 });
      assert.equal(jobs.length, 6);
      const touched = await client.touchBatch([
        { topic, id: jobs[0]!.id, token: jobs[0]!.token, leaseMs: 60_000 },
        { topic, id: jobs[1]!.id, token: "wrong" },
      ]);
      assert.ok(typeof touched[0] === "number" && touched[0] > Date.now() + 50_000);
      assert.ok(touched[1] instanceof DqError && touched[1].code === "lease_mismatch" && touched[1].status === 409);
      const acked = await client.ackBatch([
        { topic, id: jobs[0]!.id, token: jobs[0]!.token },
        { topic, id: jobs[1]!.id, token: jobs[1]!.token },
        { topic, id: "nope", token: "x" },
        { topic, id: jobs[0]!.id, token: jobs[0]!.token },
      ]);
      assert.equal(acked[0], true);
      assert.equal(acked[1], true);
      assert.ok(acked[2] instanceof DqError && acked[2].code === "job_not_found" && acked[2].status === 404);
      assert.ok(acked[3] instanceof DqError && acked[3].code === "job_not_found");
      const nacked = await client.nackBatch([
        { topic, id: jobs[2]!.id, token: jobs[2]!.token, error: "e1" },
        { topic, id: jobs[3]!.id, token: jobs[3]!.token, error: "e2", dead: true },
        { topic, id: jobs[4]!.id, token: jobs[4]!.token, retryInMs: 0, priority: 3 },
        { topic, id: jobs[5]!.id, token: "wrong" },
      ]);
      assert.ok(!(nacked[0] instanceof DqError) && nacked[0]!.state === "scheduled");
      assert.ok(!(nacked[1] instanceof DqError) && nacked[1]!.state === "dead");
      assert.ok(!(nacked[2] instanceof DqError));
      assert.ok(nacked[3] instanceof DqError && nacked[3].code === "lease_mismatch");
      assert.equal((await client.get(topic, jobs[4]!.id)).priority, 3);
      await rejectsWith(client.ackBatch([]), 400, "invalid_batch");
      await rejectsWith(client.nackBatch([]), 400, "invalid_batch");
      await rejectsWith(client.touchBatch([]), 400, "invalid_batch");
    });

    test("topic settings: configure, get, list, delete", async () => {
      const prefix = unique("c.topics");
      const topic = `${prefix}.a`;
      const cfg = await client.configureTopic(topic, {
        maxAttempts: 7,
        leaseMs: 12_000,
        deadCap: 50,
        retry: { exponential: { initialMs: 500, factor: 2, maxMs: 10_000, jitter: 0 } },
        rateLimit: { limit: 100, perMs: 1000 },
      });
      assert.equal(cfg.maxAttempts, 7);
      assert.equal(cfg.leaseMs, 12_000);
      assert.equal(cfg.deadCap, 50);
      assert.deepEqual(cfg.retry, { exponential: { initialMs: 500, factor: 2, maxMs: 10_000, jitter: 0 } });
      assert.equal(cfg.rateLimit?.limit, 100);
      assert.equal(cfg.rateLimit?.perMs, 1000);
      const cleared = await client.configureTopic(topic, { rateLimit: null });
      assert.equal(cleared.rateLimit, undefined);
      assert.equal(cleared.maxAttempts, 7);
      await client.enqueue(topic, 1);
      const info = await client.getTopic(topic);
      assert.equal(info.name, topic);
      assert.equal(info.config.maxAttempts, 7);
      assert.equal(info.configSources.maxAttempts, "set");
      assert.equal(info.configSources.partitions, "default");
      assert.equal(info.stats.ready + info.stats.scheduled, 1);
      assert.equal(info.stats.counters.enqueued, 1);
      await client.configureTopic(`${prefix}.b`, {});
      await client.configureTopic(`${prefix}.c`, {});
      const page = await client.listTopics({ prefix, limit: 2 });
      assert.deepEqual(page.topics.map((t) => t.name), [`${prefix}.a`, `${prefix}.b`]);
      assert.equal(page.nextCursor, `${prefix}.b`);
      const page2 = await client.listTopics({ prefix, limit: 2, cursor: page.nextCursor! });
      assert.deepEqual(page2.topics.map((t) => t.name), [`${prefix}.c`]);
      assert.equal(page2.nextCursor, null);
      const all: string[] = [];
      for await (const t of client.topics(prefix)) all.push(t.name);
      assert.deepEqual(all, [`${prefix}.a`, `${prefix}.b`, `${prefix}.c`]);
      assert.equal(await client.deleteTopic(topic), 1);
      await rejectsWith(client.getTopic(topic), 404, "topic_not_found");
      await rejectsWith(client.deleteTopic(topic), 404, "topic_not_found");
      await rejectsWith(client.configureTopic(topic, { maxAttempts: 0 }), 400, "invalid_max_attempts");
      await rejectsWith(client.configureTopic(topic, { rateLimit: { limit: 0, perMs: 1 } }), 400, "invalid_rate_limit");
      await rejectsWith(client.listTopics({ limit: 0 }), 400, "invalid_limit");
    });

    test("dead letters: list, replay, purge", async () => {
      const topic = unique("c.dead");
      await client.enqueueBatch(topic, [0, 1, 2].map((i) => ({ body: { i }, id: `d${i}` })));
      const jobs = await client.reserve(topic, { max: 3, waitMs: 1000 });
      for (const j of jobs) await client.nack(topic, j.id, j.token, { error: `bad ${j.id}`, dead: true });
      const dead = await client.listDead(topic);
      assert.deepEqual(dead.map((j) => j.id).sort(), ["d0", "d1", "d2"]);
      assert.equal(dead[0]!.state, "dead");
      assert.match(dead[0]!.lastError!, /^bad d/);
      assert.ok(dead[0]!.diedAtMs! > 0);
      assert.equal(dead[0]!.bodyText, JSON.stringify(dead[0]!.body));
      assert.equal((await client.listDead(topic, { offset: 1, limit: 1 })).length, 1);
      assert.equal(await client.replayDead(topic, ["d0"]), 1);
      const back = await client.get(topic, "d0");
      assert.ok(["ready", "scheduled"].includes(back.state));
      assert.equal(back.attempts, 0);
      assert.equal(await client.replayDead(topic), 2);
      assert.equal((await client.listDead(topic)).length, 0);
      const again = await client.reserve(topic, { max: 3, waitMs: 1000 });
      assert.equal(again.length, 3);
      for (const j of again) await client.nack(topic, j.id, j.token, { dead: true });
      assert.equal(await client.purgeDead(topic), 3);
      assert.equal((await client.listDead(topic)).length, 0);
      await rejectsWith(client.listDead(unique("c.nope")), 404, "topic_not_found");
      await rejectsWith(client.replayDead(unique("c.nope")), 404, "topic_not_found");
      await rejectsWith(client.purgeDead(unique("c.nope")), 404, "topic_not_found");
      await rejectsWith(client.listDead(topic, { limit: 0 }), 400, "invalid_limit");
    });

    test("listJobs (export)", async () => {
      const topic = unique("c.list");
      await client.enqueue(topic, new RawJson('{"x": 18446744073709551617}'), { id: "l1" });
      await client.enqueue(topic, 2, { id: "l2", delayMs: 60_000 });
      const page = await client.listJobs(topic, { limit: 100 });
      assert.deepEqual(page.jobs.map((j) => j.id).sort(), ["l1", "l2"]);
      assert.equal(page.jobs.find((j) => j.id === "l1")!.bodyText, '{"x": 18446744073709551617}');
      const sched = await client.listJobs(topic, { state: "scheduled" });
      assert.deepEqual(sched.jobs.map((j) => j.id), ["l2"]);
      await rejectsWith(client.listJobs(unique("c.nope")), 404, "topic_not_found");
    });

    test("schedules: put, get, list, pause, resume, delete", async () => {
      const name = unique("sched");
      const topic = unique("c.sched");
      const s = await client.putSchedule(name, { topic, every: "1h", body: new RawJson('{"report": 1}'), catchUp: "skip", priority: 9 });
      assert.equal(s.name, name);
      assert.equal(s.spec.topic, topic);
      assert.equal(s.spec.every, "1h");
      assert.equal(s.spec.catchUp, "skip");
      assert.deepEqual(s.spec.body, { report: 1 });
      assert.ok(s.next.length > 0 && s.next[0]!.atMs > Date.now());
      assert.ok(s.rule.length > 0);
      const g = await client.getSchedule(name);
      assert.equal(g.spec.priority, 9);
      assert.ok((await client.listSchedules()).some((x) => x.name === name));
      const p = await client.pauseSchedule(name);
      assert.equal(p.spec.paused, true);
      assert.equal(p.next.length, 0);
      const r = await client.resumeSchedule(name);
      assert.ok(!r.spec.paused);
      await client.putSchedule(name, { topic, cron: "0 9 * * 1-5", timezone: "Europe/Berlin", body: { daily: true } });
      assert.equal((await client.getSchedule(name)).spec.cron, "0 9 * * 1-5");
      await client.deleteSchedule(name);
      await rejectsWith(client.getSchedule(name), 404, "schedule_not_found");
      await rejectsWith(client.deleteSchedule(name), 404, "schedule_not_found");
      await rejectsWith(client.pauseSchedule(name), 404, "schedule_not_found");
      await rejectsWith(client.resumeSchedule(name), 404, "schedule_not_found");
      assert.equal(await client.ready(), true);
      await rejectsWith(client.putSchedule(name, { topic, cron: "0 0 30 2 *" }), 400, "invalid_cron");
      await rejectsWith(client.putSchedule(name, { topic, every: "1h", timezone: "Mars/Base" }), 400, "invalid_timezone");
    });

    test("a path segment with special characters", async () => {
      const topic = unique("c.seg/a+b:c");
      const id = "id/with ?#%&=+ü";
      await rejectsWith(client.enqueue(topic, 1, { id }), 400, "invalid_id");
      const id2 = "id/with?#%&=+ü";
      await client.enqueue(topic, 1, { id: id2 });
      assert.equal((await client.get(topic, id2)).id, id2);
      assert.equal((await client.get(topic, id2)).topic, topic);
    });

    test("calls one after the other share one kept-alive connection", async () => {
      // A proxy in front of dq that counts the connections made to it.
      const target = new URL(dq.url);
      let connections = 0;
      const sockets: net.Socket[] = [];
      const proxy = net.createServer((down) => {
        connections += 1;
        const up = net.connect(Number(target.port), target.hostname);
        sockets.push(down, up);
        down.pipe(up).pipe(down);
        const end = () => {
          down.destroy();
          up.destroy();
        };
        down.on("error", end).on("close", end);
        up.on("error", end).on("close", end);
      });
      await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
      const port = (proxy.address() as AddressInfo).port;
      const viaProxy = new Client(`http://127.0.0.1:${port}`, { timeoutMs: 10_000 });
      try {
        const topic = unique("c.keepalive");
        for (let i = 0; i < 5; i++) {
          await viaProxy.enqueue(topic, i, { delayMs: 3_600_000 });
        }
        assert.equal(connections, 1, "five calls over one connection");
      } finally {
        viaProxy.close();
        for (const s of sockets) s.destroy();
        await new Promise<void>((resolve) => proxy.close(() => resolve()));
      }
    });
  });
}

describe("client without a dq server", () => {
  test("a refused connection is a TransportError, raised after the retry bound", async () => {
    const port = await freePort();
    const client = new Client(`http://127.0.0.1:${port}`, { retryMaxMs: 600 });
    const t0 = Date.now();
    await assert.rejects(client.get("t", "x"), (e: unknown) => e instanceof TransportError && e.errno === "ECONNREFUSED");
    const took = Date.now() - t0;
    assert.ok(took >= 250 && took < 3000, `retried for ${took} ms`);
    // a non-idempotent call is retried on a refused connection too (it never got there)
    await assert.rejects(client.ack("t", "x", "tok"), TransportError);
    assert.equal(await client.ready(), false);
    client.close();
  });

  test("503 with Retry-After is retried; the API key is sent; a timeout is a TransportError", async () => {
    let calls = 0;
    const seen: Array<string | undefined> = [];
    const srv = http.createServer((req, res) => {
      calls++;
      seen.push(req.headers.authorization);
      if (req.url === "/slow") return; // never answers
      if (calls <= 2) {
        res.writeHead(503, { "content-type": "application/json", "retry-after": "0" });
        res.end('{"error":{"code":"store_unavailable","message":"redis down"}}');
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"topic":"t","id":"x","state":"ready","due_at_ms":1,"priority":1024,"attempts":0,"body":{"a":1}}');
    });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const port = (srv.address() as AddressInfo).port;
    try {
      const client = new Client(`http://127.0.0.1:${port}`, { apiKey: "dqk_test", timeoutMs: 500 });
      const job = await client.get("t", "x");
      assert.deepEqual(job.body, { a: 1 });
      assert.equal(calls, 3);
      assert.deepEqual(seen, ["Bearer dqk_test", "Bearer dqk_test", "Bearer dqk_test"]);
      // the bound: with no retry time left the 503 is raised with its code and Retry-After
      calls = 0;
      const quick = new Client(`http://127.0.0.1:${port}`, { retryMaxMs: 0 });
      const e = await rejectsWith(quick.get("t", "x"), 503, "store_unavailable");
      assert.equal(e.retryAfterMs, 0);
      assert.equal(e.transient, true);
      // timeouts
      await assert.rejects(
        (client as unknown as { send: (...a: unknown[]) => Promise<string> }).send("GET", "/slow", undefined, { idempotent: false }),
        (err: unknown) => err instanceof TransportError && err.errno === "ETIMEDOUT",
      );
      // abort
      const ac = new AbortController();
      const p = client.getTopic("x", { signal: ac.signal });
      ac.abort();
      await assert.rejects(p, (err: unknown) => (err as Error).name === "AbortError");
      client.close();
      quick.close();
    } finally {
      srv.closeAllConnections();
      srv.close();
    }
  });
});

describe("API keys (embedded store, a server of its own)", () => {
  let dq: DqServer;
  before(async () => {
    dq = await DqServer.start({});
  });
  after(async () => {
    await dq?.stop();
  });
  test("calls carry the key; without it dq answers 401 unauthorized", async () => {
    const r = await fetch(`${dq.url}/v1/keys`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "node-test", scopes: ["admin"] }),
    });
    assert.equal(r.status, 201);
    const { secret } = (await r.json()) as { secret: string };
    const anon = new Client(dq.url);
    await rejectsWith(anon.enqueue("k.t", 1), 401, "unauthorized");
    const keyed = new Client(dq.url, { apiKey: secret });
    const e = await keyed.enqueue("k.t", 1);
    assert.equal(e.created, true);
    const wrong = new Client(dq.url, { apiKey: "dqk_" + "0".repeat(64) });
    await rejectsWith(wrong.get("k.t", e.id), 401, "unauthorized");
    anon.close();
    keyed.close();
    wrong.close();
  });
});

/** A self-signed certificate for 127.0.0.1 made with openssl, or undefined when openssl is missing. */
function selfSigned(): { dir: string; cert: string; key: string } | undefined {
  const dir = mkdtempSync(path.join(tmpdir(), "dq-node-tls-"));
  const cert = path.join(dir, "cert.pem");
  const key = path.join(dir, "key.pem");
  try {
    execFileSync(
      "openssl",
      ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
      { stdio: "ignore" },
    );
    return { dir, cert, key };
  } catch {
    rmSync(dir, { recursive: true, force: true });
    return undefined;
  }
}

for (const store of stores) {
  describe(`TLS (${store.name} store)`, () => {
    const tls = selfSigned();
    let dq: DqServer | undefined;
    before(async () => {
      if (tls) dq = await DqServer.start(store, [], tls);
    });
    after(async () => {
      await dq?.stop();
      if (tls) rmSync(tls.dir, { recursive: true, force: true });
    });
    test("https with a trusted CA, refused without it, accepted with verify: false", { skip: tls ? false : "openssl not found" }, async () => {
      const topic = unique("tls");
      const trusted = new Client(dq!.url, { ca: readFileSync(tls!.cert) });
      const e = await trusted.enqueue(topic, { secure: true });
      assert.deepEqual((await trusted.get(topic, e.id)).body, { secure: true });
      const untrusted = new Client(dq!.url, { retryMaxMs: 0 });
      await assert.rejects(untrusted.get(topic, e.id), (err: unknown) => err instanceof TransportError && /self[- ]signed/i.test(err.message));
      const unverified = new Client(dq!.url, { verify: false });
      assert.equal((await unverified.get(topic, e.id)).id, e.id);
      trusted.close();
      untrusted.close();
      unverified.close();
    });
  });
}
