/** The dq HTTP client. */

import * as http from "node:http";
import * as https from "node:https";

import { DqError, TransportError, itemError } from "./errors.js";
import { camelize, rawBodies, snakeize } from "./json.js";
import type {
  AckItem,
  BatchJob,
  CallOptions,
  Enqueued,
  EnqueueOptions,
  Job,
  JobState,
  Lease,
  NackItem,
  NackOptions,
  Nacked,
  ReserveOptions,
  ScheduleInfo,
  ScheduleSpec,
  TopicConfig,
  TopicConfigPatch,
  TopicInfo,
  TopicPage,
  TouchItem,
} from "./types.js";

/** A job body given as JSON text, sent exactly as written (big numbers, key order, spacing). */
export class RawJson {
  readonly text: string;
  constructor(text: string) {
    JSON.parse(text); // throws a SyntaxError for text that is not JSON
    this.text = text;
  }
}

/** Options of a `Client`. */
export interface ClientOptions {
  /** Sent as `Authorization: Bearer …`: an API key (`dqk_…`) or the admin token. */
  apiKey?: string;
  /** Per-request timeout (default 60 s; a reserve waits at least its `waitMs` + 10 s). */
  timeoutMs?: number;
  /** How long transient failures are retried, in all, before the error is raised (default 30 s; 0: never). */
  retryMaxMs?: number;
  /** For `https://`: certificate authorities to trust (PEM), instead of the system's. */
  ca?: string | Buffer | Array<string | Buffer>;
  /** For `https://`: verify the server's certificate (default true). */
  verify?: boolean;
  /** For `https://`: a client certificate and its key (PEM), for mutual TLS. */
  cert?: string | Buffer;
  key?: string | Buffer;
  /** Most connections kept open to the server (default 64). */
  maxSockets?: number;
  /** Extra headers sent with every call. */
  headers?: Record<string, string>;
}

type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

interface Call extends CallOptions {
  /** Safe to repeat after a broken connection (a 503 with Retry-After is retried for every call). */
  idempotent: boolean;
  /** Retry transient failures at all (default true). */
  retry?: boolean;
}

/** Percent-encodes a path segment (a topic, a job id, a schedule name). */
export function encodeSegment(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });

function parseRetryAfter(v: string | string[] | undefined): number | undefined {
  if (typeof v !== "string") return undefined;
  const s = Number(v.trim());
  if (Number.isFinite(s)) return Math.max(0, s * 1000);
  const d = Date.parse(v);
  return Number.isFinite(d) ? Math.max(0, d - Date.now()) : undefined;
}

/** The wire form of a body: `{"body": …}` text, or `body_base64`. */
function bodyFields(body: unknown): { raw?: string; base64?: string; json?: unknown } {
  if (body instanceof RawJson) return { raw: body.text };
  if (body instanceof Uint8Array) return { base64: Buffer.from(body).toString("base64") };
  if (body instanceof ArrayBuffer) return { base64: Buffer.from(body).toString("base64") };
  return { json: body };
}

/** The JSON text of an enqueue request (a `RawJson` body spliced in as it is). */
function enqueueText(body: unknown, opts: Omit<EnqueueOptions, "signal"> = {}): string {
  const { dedupWindowMs, dedupMs, ...rest } = opts as EnqueueOptions;
  delete (rest as { signal?: unknown }).signal;
  const wire = snakeize({ ...rest, dedupMs: dedupMs ?? dedupWindowMs });
  const b = bodyFields(body);
  if (b.base64 !== undefined) wire.body_base64 = b.base64;
  else if (b.json !== undefined) wire.body = b.json;
  const text = JSON.stringify(wire);
  if (b.raw === undefined) return text;
  return text === "{}" ? `{"body":${b.raw}}` : `{"body":${b.raw},${text.slice(1)}`;
}

/** Adds `bodyText` / `bodyBytes` to a job read from a reply. */
function withBody<T extends { body?: unknown; bodyBase64?: string }>(
  job: T,
  raws: Map<string, string>,
  path: string,
): T & { bodyText?: string; bodyBytes?: Buffer } {
  const out = job as T & { bodyText?: string; bodyBytes?: Buffer };
  if (typeof job.bodyBase64 === "string") {
    out.bodyBytes = Buffer.from(job.bodyBase64, "base64");
  } else if ("body" in job) {
    out.bodyText = raws.get(path) ?? JSON.stringify(job.body);
  }
  return out;
}

/** A client of one dq server. Connections are kept alive and shared; one client per process is enough. */
export class Client {
  readonly baseUrl: string;
  private readonly agent: http.Agent;
  private readonly mod: typeof http | typeof https;
  private readonly timeoutMs: number;
  private readonly retryMaxMs: number;
  private readonly headers: Record<string, string>;

  /** A client of the server at `url` (e.g. `http://127.0.0.1:7070`). */
  constructor(url: string, options: ClientOptions = {}) {
    const u = new URL(url);
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new TypeError(`dq url must be http:// or https://, not ${u.protocol}`);
    }
    this.baseUrl = url.replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.retryMaxMs = options.retryMaxMs ?? 30_000;
    this.headers = { accept: "application/json", ...(options.headers ?? {}) };
    if (options.apiKey) this.headers.authorization = `Bearer ${options.apiKey}`;
    const common = {
      keepAlive: true,
      maxSockets: options.maxSockets ?? 64,
      maxFreeSockets: options.maxSockets ?? 64,
      // Idle pooled connections are closed before dq's keep-alive limit (30 s),
      // so one is not reused just as the server closes it.
      timeout: 20_000,
      scheduling: "lifo" as const,
    };
    if (u.protocol === "https:") {
      this.mod = https;
      this.agent = new https.Agent({
        ...common,
        ca: options.ca,
        cert: options.cert,
        key: options.key,
        rejectUnauthorized: options.verify ?? true,
      });
    } else {
      this.mod = http;
      this.agent = new http.Agent(common);
    }
  }

  /** Closes the pooled connections. */
  close(): void {
    this.agent.destroy();
  }

  // ---- the one call path -------------------------------------------------

  private once(method: Method, path: string, body: string | undefined, timeoutMs: number, signal?: AbortSignal): Promise<{ status: number; text: string; retryAfterMs?: number }> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const headers: Record<string, string | number> = { ...this.headers };
      if (body !== undefined) {
        headers["content-type"] = "application/json";
        headers["content-length"] = Buffer.byteLength(body);
      }
      let done = false;
      const finish = (err: unknown, value?: { status: number; text: string; retryAfterMs?: number }): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        if (err) reject(err);
        else resolve(value!);
      };
      const req = this.mod.request(this.baseUrl + path, { method, headers, agent: this.agent });
      const timer = setTimeout(() => {
        const e = new TransportError(`dq did not answer ${method} ${path} within ${timeoutMs} ms`, { errno: "ETIMEDOUT" });
        finish(e);
        req.destroy(e);
      }, timeoutMs);
      const onAbort = (): void => {
        finish(signal!.reason);
        req.destroy();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      req.on("error", (err: NodeJS.ErrnoException) => {
        if (done) return;
        const code = err.code;
        const notSent =
          code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EADDRNOTAVAIL" ||
          // a pooled connection the server had closed: the request never got there
          (req.reusedSocket && code === "ECONNRESET" && !gotResponse);
        finish(new TransportError(`cannot reach dq (${method} ${path}): ${err.message}`, { cause: err, errno: code, notSent }));
      });
      let gotResponse = false;
      req.on("response", (res) => {
        gotResponse = true;
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", (err: NodeJS.ErrnoException) =>
          finish(new TransportError(`connection to dq broke (${method} ${path}): ${err.message}`, { cause: err, errno: err.code })),
        );
        res.on("aborted", () => finish(new TransportError(`connection to dq broke (${method} ${path})`, { errno: "ECONNRESET" })));
        res.on("end", () =>
          finish(null, {
            status: res.statusCode ?? 0,
            text: Buffer.concat(chunks).toString("utf8"),
            retryAfterMs: parseRetryAfter(res.headers["retry-after"]),
          }),
        );
      });
      req.end(body);
    });
  }

  /** Sends a request, retrying transient failures within `retryMaxMs`; returns the reply's text. */
  private async send(method: Method, path: string, body: string | undefined, call: Call): Promise<string> {
    const started = Date.now();
    const timeoutMs = call.timeoutMs ?? this.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      let err: unknown;
      let wait = Math.min(100 * 2 ** attempt, 2000);
      try {
        const r = await this.once(method, path, body, timeoutMs, call.signal);
        if (r.status >= 200 && r.status < 300) return r.text;
        let code = "";
        let message = r.text.slice(0, 500) || `HTTP ${r.status}`;
        try {
          const e = JSON.parse(r.text) as { error?: { code?: string; message?: string } };
          if (e?.error) {
            code = e.error.code ?? "";
            message = e.error.message ?? message;
          }
        } catch {
          /* not JSON: keep the text */
        }
        const e = new DqError(r.status, code, message, r.retryAfterMs);
        // A 503 with Retry-After: the server says to try again (a write with an
        // unknown outcome only when repeating it is harmless).
        const retryable =
          r.status === 503 && r.retryAfterMs !== undefined && (call.idempotent || code !== "store_outcome_unknown");
        if (!retryable) throw e;
        err = e;
        wait = Math.max(r.retryAfterMs ?? 0, 50);
      } catch (e) {
        if (err === undefined) {
          if (!(e instanceof TransportError)) throw e;
          if (!call.idempotent && !e.notSent) throw e;
          err = e;
        }
      }
      if (call.retry === false || Date.now() - started + wait > this.retryMaxMs) throw err;
      await sleep(wait, call.signal);
    }
  }

  private async json<T>(method: Method, path: string, body: unknown, call: Call): Promise<T> {
    const text = await this.send(method, path, body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body), call);
    return this.parse<T>(text, method, path);
  }

  private parse<T>(text: string, method: string, path: string): T {
    try {
      return JSON.parse(text) as T;
    } catch (e) {
      throw new TransportError(`dq's reply to ${method} ${path} is not JSON`, { cause: e });
    }
  }

  private jobPath(topic: string, id: string, action?: string): string {
    return `/v1/topics/${encodeSegment(topic)}/jobs/${encodeSegment(id)}${action ? `/${action}` : ""}`;
  }

  // ---- jobs --------------------------------------------------------------

  /**
   * Enqueues a job. `body` is any JSON value (`JSON.stringify`d), a
   * `RawJson` (sent exactly as written), or bytes (`Uint8Array`/`Buffer`,
   * sent as `body_base64`). Retried on a broken connection only with an `id`.
   */
  async enqueue(topic: string, body: unknown, options: EnqueueOptions = {}): Promise<Enqueued> {
    const r = await this.json<unknown>("POST", `/v1/topics/${encodeSegment(topic)}/jobs`, enqueueText(body, options), {
      idempotent: options.id !== undefined,
      signal: options.signal,
    });
    return camelize<Enqueued>(r);
  }

  /** Enqueues up to 1000 jobs in one atomic call; a result per job, in order: `Enqueued` or the job's `DqError`. */
  async enqueueBatch(topic: string, jobs: BatchJob[], options: CallOptions = {}): Promise<Array<Enqueued | DqError>> {
    const text = `{"jobs":[${jobs.map(({ body, ...o }) => enqueueText(body, o)).join(",")}]}`;
    const r = await this.json<{ results: Array<{ error?: { code: string; message: string } }> }>(
      "POST",
      `/v1/topics/${encodeSegment(topic)}/jobs:batch`,
      text,
      { idempotent: jobs.length > 0 && jobs.every((j) => j.id !== undefined), ...options },
    );
    return r.results.map((x) => (x.error ? itemError(x.error) : camelize<Enqueued>(x)));
  }

  /** Reads a job. `DqError` 404 `job_not_found` when there is none. */
  async get(topic: string, id: string, options: CallOptions = {}): Promise<Job> {
    const path = this.jobPath(topic, id);
    const text = await this.send("GET", path, undefined, { idempotent: true, ...options });
    return withBody(camelize<Job>(this.parse(text, "GET", path)), rawBodies(text), "");
  }

  /** Cancels a job in any state. */
  async cancel(topic: string, id: string, options: CallOptions = {}): Promise<{ id: string; cancelled: boolean; state: JobState }> {
    return this.json("DELETE", this.jobPath(topic, id), undefined, { idempotent: false, ...options });
  }

  /** Moves a waiting job: `{ delayMs }` from now (by dq's clock) or `{ dueAtMs }`. Returns the new due time. */
  async reschedule(
    topic: string,
    id: string,
    when: { delayMs: number } | { dueAtMs: number },
    options: CallOptions = {},
  ): Promise<{ id: string; dueAtMs: number }> {
    const r = await this.json<unknown>("PATCH", this.jobPath(topic, id), snakeize(when), { idempotent: true, ...options });
    return camelize(r);
  }

  /** One page of a topic's jobs, all states or one (for an export). */
  async listJobs(
    topic: string,
    query: { state?: JobState; limit?: number; cursor?: string } = {},
    options: CallOptions = {},
  ): Promise<{ jobs: Job[]; cursor: string | null }> {
    const path = `/v1/topics/${encodeSegment(topic)}/jobs${qs(query)}`;
    const text = await this.send("GET", path, undefined, { idempotent: true, ...options });
    const raws = rawBodies(text);
    const r = camelize<{ jobs: Job[]; cursor: string | null }>(this.parse(text, "GET", path));
    r.jobs = r.jobs.map((j, i) => withBody({ ...j, topic }, raws, `jobs.${i}`));
    return r;
  }

  // ---- leases ------------------------------------------------------------

  /** Leases up to `max` due jobs of `topics`, waiting up to `waitMs` for one to fall due. */
  async reserve(topics: string | string[], options: ReserveOptions & { retry?: boolean } = {}): Promise<Lease[]> {
    const body = snakeize({
      topics: Array.isArray(topics) ? topics : [topics],
      max: options.max,
      leaseMs: options.leaseMs,
      waitMs: options.waitMs,
    });
    const timeoutMs = Math.max(options.timeoutMs ?? this.timeoutMs, (options.waitMs ?? 0) + 10_000);
    const text = await this.send("POST", "/v1/reserve", JSON.stringify(body), {
      idempotent: true,
      signal: options.signal,
      timeoutMs,
      retry: options.retry,
    });
    const raws = rawBodies(text);
    const r = camelize<{ jobs: Lease[] }>(this.parse(text, "POST", "/v1/reserve"));
    return r.jobs.map((j, i) => withBody(j, raws, `jobs.${i}`));
  }

  /** Completes a leased job. `DqError` 409 `lease_mismatch` when the lease is no longer yours. */
  async ack(topic: string, id: string, token: string, options: CallOptions = {}): Promise<void> {
    await this.json("POST", this.jobPath(topic, id, "ack"), { token }, { idempotent: false, ...options });
  }

  /** Fails the attempt: retried after `retryInMs` (or the retry policy), or dead (`dead: true`, or no attempts left). */
  async nack(topic: string, id: string, token: string, options: NackOptions = {}): Promise<Nacked> {
    const { signal, ...rest } = options;
    const r = await this.json<unknown>("POST", this.jobPath(topic, id, "nack"), snakeize({ token, ...rest }), {
      idempotent: false,
      signal,
    });
    return camelize(r);
  }

  /** Extends the lease to now + `leaseMs` (default: the job's, then the topic's). Returns the new deadline. */
  async touch(topic: string, id: string, token: string, options: CallOptions & { leaseMs?: number } = {}): Promise<number> {
    const { leaseMs, ...call } = options;
    const r = await this.json<{ lease_deadline_ms: number }>(
      "POST",
      this.jobPath(topic, id, "touch"),
      snakeize({ token, leaseMs }),
      { idempotent: true, ...call },
    );
    return r.lease_deadline_ms;
  }

  /** Gives the job back without counting the attempt; due again after `delayMs` (default 0). */
  async release(
    topic: string,
    id: string,
    token: string,
    options: CallOptions & { delayMs?: number } = {},
  ): Promise<{ id: string; state: JobState; dueAtMs: number }> {
    const { delayMs, ...call } = options;
    const r = await this.json<unknown>("POST", this.jobPath(topic, id, "release"), snakeize({ token, delayMs }), {
      idempotent: false,
      ...call,
    });
    return camelize(r);
  }

  /** Acks up to 1000 jobs in one call; a result per item: `true` or the item's `DqError`. */
  async ackBatch(items: AckItem[], options: CallOptions & { retry?: boolean } = {}): Promise<Array<true | DqError>> {
    const acks = items.map(({ topic, id, token }) => ({ topic, id, token }));
    const r = await this.json<{ results: Array<{ error?: { code: string; message: string } }> }>(
      "POST",
      "/v1/ack:batch",
      { acks },
      { idempotent: false, ...options },
    );
    return r.results.map((x) => (x.error ? itemError(x.error) : true));
  }

  /** Nacks up to 1000 jobs in one call; a result per item: `{ state, dueAtMs? }` or the item's `DqError`. */
  async nackBatch(items: NackItem[], options: CallOptions & { retry?: boolean } = {}): Promise<Array<Nacked | DqError>> {
    const nacks = items.map((n) => snakeize({ ...n }));
    const r = await this.json<{ results: Array<{ error?: { code: string; message: string } }> }>(
      "POST",
      "/v1/nack:batch",
      { nacks },
      { idempotent: false, ...options },
    );
    return r.results.map((x, i) => (x.error ? itemError(x.error) : { id: items[i]!.id, ...camelize<Nacked>(x) }));
  }

  /** Extends up to 1000 leases in one call; a result per item: the new deadline or the item's `DqError`. */
  async touchBatch(items: TouchItem[], options: CallOptions & { retry?: boolean } = {}): Promise<Array<number | DqError>> {
    const touches = items.map((t) => snakeize({ ...t }));
    const r = await this.json<{ results: Array<{ lease_deadline_ms?: number; error?: { code: string; message: string } }> }>(
      "POST",
      "/v1/touch:batch",
      { touches },
      { idempotent: true, ...options },
    );
    return r.results.map((x) => (x.error ? itemError(x.error) : (x.lease_deadline_ms as number)));
  }

  // ---- topics ------------------------------------------------------------

  /** One topic's settings and counts. `DqError` 404 `topic_not_found` for an unknown topic. */
  async getTopic(topic: string, options: CallOptions = {}): Promise<TopicInfo> {
    return camelize(await this.json("GET", `/v1/topics/${encodeSegment(topic)}`, undefined, { idempotent: true, ...options }));
  }

  /** Creates or changes a topic's settings (fields left out keep their value); returns the settings in force. */
  async configureTopic(topic: string, patch: TopicConfigPatch, options: CallOptions = {}): Promise<TopicConfig> {
    const r = await this.json<{ config: unknown }>("PUT", `/v1/topics/${encodeSegment(topic)}`, snakeize(patch), {
      idempotent: true,
      ...options,
    });
    return camelize(r.config);
  }

  /** Deletes a topic and all its jobs; returns how many jobs. */
  async deleteTopic(topic: string, options: CallOptions = {}): Promise<number> {
    const r = await this.json<{ deleted_jobs: number }>("DELETE", `/v1/topics/${encodeSegment(topic)}`, undefined, {
      idempotent: false,
      ...options,
    });
    return r.deleted_jobs;
  }

  /** One page of the topics in name order; follow `nextCursor` until it is null. */
  async listTopics(query: { limit?: number; cursor?: string; prefix?: string } = {}, options: CallOptions = {}): Promise<TopicPage> {
    return camelize(await this.json("GET", `/v1/topics${qs(query)}`, undefined, { idempotent: true, ...options }));
  }

  /** Every topic (whose name starts with `prefix`), following the pages. */
  async *topics(prefix?: string, options: CallOptions = {}): AsyncGenerator<{ name: string; stats: TopicPage["topics"][number]["stats"] }> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.listTopics({ limit: 1000, cursor, prefix }, options);
      yield* page.topics;
      if (page.nextCursor === null) return;
      cursor = page.nextCursor;
    }
  }

  // ---- dead letters ------------------------------------------------------

  /** Dead letters of a topic, oldest death first. */
  async listDead(topic: string, query: { offset?: number; limit?: number } = {}, options: CallOptions = {}): Promise<Job[]> {
    const path = `/v1/topics/${encodeSegment(topic)}/dead${qs(query)}`;
    const text = await this.send("GET", path, undefined, { idempotent: true, ...options });
    const raws = rawBodies(text);
    const r = camelize<{ jobs: Job[] }>(this.parse(text, "GET", path));
    return r.jobs.map((j, i) => withBody(j, raws, `jobs.${i}`));
  }

  /** Replays dead letters (these ids, or all when `ids` is left out): due now, attempts reset. Returns how many. */
  async replayDead(topic: string, ids?: string[], options: CallOptions = {}): Promise<number> {
    const r = await this.json<{ replayed: number }>(
      "POST",
      `/v1/topics/${encodeSegment(topic)}/dead/replay`,
      ids === undefined ? {} : { ids },
      { idempotent: true, ...options },
    );
    return r.replayed;
  }

  /** Deletes a topic's dead letters; returns how many. */
  async purgeDead(topic: string, options: CallOptions = {}): Promise<number> {
    const r = await this.json<{ purged: number }>("DELETE", `/v1/topics/${encodeSegment(topic)}/dead`, undefined, {
      idempotent: true,
      ...options,
    });
    return r.purged;
  }

  // ---- schedules ---------------------------------------------------------

  /** Creates or replaces a schedule. */
  async putSchedule(name: string, spec: ScheduleSpec, options: CallOptions = {}): Promise<ScheduleInfo> {
    const { body, ...rest } = spec;
    const wire = snakeize(rest);
    const b = bodyFields(body);
    let text = JSON.stringify(b.json === undefined ? wire : { ...wire, body: b.json });
    if (b.raw !== undefined) text = `{"body":${b.raw},${text.slice(1)}`;
    if (b.base64 !== undefined) throw new TypeError("a schedule's body is JSON, not bytes");
    return this.schedule("PUT", `/v1/schedules/${encodeSegment(name)}`, text, true, options);
  }

  /** One schedule. `DqError` 404 `schedule_not_found`. */
  async getSchedule(name: string, options: CallOptions = {}): Promise<ScheduleInfo> {
    return this.schedule("GET", `/v1/schedules/${encodeSegment(name)}`, undefined, true, options);
  }

  /** Every schedule, by name. */
  async listSchedules(options: CallOptions = {}): Promise<ScheduleInfo[]> {
    const r = await this.json<{ schedules: unknown[] }>("GET", "/v1/schedules", undefined, { idempotent: true, ...options });
    return r.schedules.map((s) => camelize<ScheduleInfo>(s));
  }

  /** Pauses a schedule (fires nothing more). */
  async pauseSchedule(name: string, options: CallOptions = {}): Promise<ScheduleInfo> {
    return this.schedule("POST", `/v1/schedules/${encodeSegment(name)}/pause`, undefined, true, options);
  }

  /** Resumes a schedule (from now on; passed slots are not caught up). */
  async resumeSchedule(name: string, options: CallOptions = {}): Promise<ScheduleInfo> {
    return this.schedule("POST", `/v1/schedules/${encodeSegment(name)}/resume`, undefined, true, options);
  }

  /** Deletes a schedule. */
  async deleteSchedule(name: string, options: CallOptions = {}): Promise<void> {
    await this.json("DELETE", `/v1/schedules/${encodeSegment(name)}`, undefined, { idempotent: false, ...options });
  }

  private async schedule(method: Method, path: string, body: string | undefined, idempotent: boolean, options: CallOptions): Promise<ScheduleInfo> {
    const text = await this.send(method, path, body, { idempotent, ...options });
    const info = camelize<ScheduleInfo>(this.parse(text, method, path));
    const raw = rawBodies(text).get("spec");
    if (raw !== undefined) (info.spec as ScheduleInfo["spec"] & { bodyText?: string }).bodyText = raw;
    return info;
  }

  // ---- health ------------------------------------------------------------

  /** Whether the server is ready (`GET /readyz` answers 200). Never throws. */
  async ready(options: CallOptions = {}): Promise<boolean> {
    try {
      await this.send("GET", "/readyz", undefined, { idempotent: true, retry: false, timeoutMs: options.timeoutMs ?? 5000, signal: options.signal });
      return true;
    } catch {
      return false;
    }
  }
}

function qs(query: Record<string, string | number | undefined>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined) parts.push(`${k}=${encodeURIComponent(String(v))}`);
  }
  return parts.length ? `?${parts.join("&")}` : "";
}

