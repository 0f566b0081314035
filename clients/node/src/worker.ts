/**
 * The worker: reserves due jobs in batches, runs async handlers per topic
 * with a concurrency limit, extends the leases of running handlers, acks
 * and nacks in batches beside the reserve loop, and stops gracefully.
 */

import type { Client } from "./client.js";
import { Dead, DqError, RetryLater, isTransient } from "./errors.js";
import type { AckItem, Lease, NackItem, TouchItem } from "./types.js";

/** What a handler gets: the reserved job, and a signal aborted when the stop's grace period ends. */
export type Handler = (job: Lease, ctx: { signal: AbortSignal }) => unknown;

/** Options of a `Worker`. */
export interface WorkerOptions {
  /** Most handlers running at once (default 4). */
  concurrency?: number;
  /** Lease per job; extended every third of it while its handler runs (default 30000, at least 300). */
  leaseMs?: number;
  /** How long running handlers may take to finish after a stop (default 10000). */
  graceMs?: number;
  /** Most jobs per reserve call (default 100, at most 1000). */
  batch?: number;
  /** How long a reserve waits for a job to fall due (default 1000; also bounds how long a stop waits for it). */
  waitMs?: number;
  /** `run()` stops on SIGTERM and SIGINT (default true). */
  handleSignals?: boolean;
  /** Where the worker reports problems (default: `console.warn`). */
  onError?: (message: string, error?: unknown) => void;
}

/** Counts of what a worker did, readable while it runs. */
export interface WorkerStats {
  /** Handlers that returned (acked). */
  done: number;
  /** Handlers that threw an ordinary error (nacked). */
  failed: number;
  /** Handlers that threw `Dead` (nacked dead). */
  dead: number;
  /** Handlers that threw `RetryLater` (released). */
  retried: number;
  /** Jobs reserved but not started at the stop, given back. */
  handedBack: number;
  /** Reserve calls that failed (dq down, …). */
  reserveErrors: number;
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = (): void => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/** Collects acks or nacks and sends them in batches (up to 1000, or what came within 5 ms). */
class Reporter<T extends AckItem> {
  private queue: T[] = [];
  private wake: (() => void) | null = null;
  private closed = false;
  private readonly loop: Promise<void>;

  constructor(
    private readonly verb: string,
    private readonly sendBatch: (items: T[]) => Promise<Array<unknown>>,
    private readonly warn: (message: string, error?: unknown) => void,
  ) {
    this.loop = this.run();
  }

  push(item: T): void {
    if (this.closed) {
      this.warn(`${this.verb} of ${item.topic}/${item.id} after the worker stopped: not sent; the job comes back when its lease ends`);
      return;
    }
    this.queue.push(item);
    this.wake?.();
  }

  /** Sends what is queued, then ends. */
  async close(): Promise<void> {
    this.closed = true;
    this.wake?.();
    await this.loop;
  }

  private async run(): Promise<void> {
    for (;;) {
      if (this.queue.length === 0) {
        if (this.closed) return;
        await new Promise<void>((r) => (this.wake = r));
        this.wake = null;
        continue;
      }
      if (this.queue.length < 1000 && !this.closed) await sleep(5);
      const batch = this.queue.splice(0, 1000);
      const started = Date.now();
      for (let tries = 1; ; tries++) {
        try {
          const results = await this.sendBatch(batch);
          results.forEach((r, i) => {
            if (r instanceof DqError) {
              this.warn(`${this.verb} of ${batch[i]!.topic}/${batch[i]!.id} refused (lease lost or job cancelled): ${r.code}`, r);
            }
          });
          break;
        } catch (e) {
          // Sending again is harmless: an item already done answers lease_mismatch / job_not_found.
          if (isTransient(e) && Date.now() - started < 30_000) {
            if (tries === 1) this.warn(`${this.verb}s failed; retrying`, e);
            await sleep(Math.min(100 * tries, 1000));
            continue;
          }
          this.warn(`${batch.length} ${this.verb}s failed; those jobs come back when their leases end`, e);
          break;
        }
      }
    }
  }
}

/**
 * Runs handlers for due jobs: `new Worker(client, { concurrency: 4 })`,
 * `worker.handle(topic, async (job) => { … })`, `await worker.run()`.
 *
 * A handler that returns acks its job; one that throws nacks it with the
 * error's message (the topic's retry policy decides retry or dead); `Dead`
 * sends it to the dead letters at once; `RetryLater(ms)` gives it back
 * without counting the attempt.
 */
export class Worker {
  readonly stats: WorkerStats = { done: 0, failed: 0, dead: 0, retried: 0, handedBack: 0, reserveErrors: 0 };
  private readonly handlers = new Map<string, Handler>();
  private readonly concurrency: number;
  private readonly leaseMs: number;
  private readonly graceMs: number;
  private readonly batch: number;
  private readonly waitMs: number;
  private readonly handleSignals: boolean;
  private readonly warn: (message: string, error?: unknown) => void;
  private stopper: AbortController | null = null;
  private running = false;

  constructor(
    private readonly client: Client,
    options: WorkerOptions = {},
  ) {
    this.concurrency = Math.max(1, Math.floor(options.concurrency ?? 4));
    this.leaseMs = Math.max(300, Math.floor(options.leaseMs ?? 30_000));
    this.graceMs = Math.max(0, options.graceMs ?? 10_000);
    this.batch = Math.min(1000, Math.max(1, Math.floor(options.batch ?? 100)));
    this.waitMs = Math.min(30_000, Math.max(0, Math.floor(options.waitMs ?? 1000)));
    this.handleSignals = options.handleSignals ?? true;
    this.warn =
      options.onError ??
      ((message, error) => console.warn(`dq worker: ${message}${error instanceof Error ? `: ${error.message}` : ""}`));
  }

  /** Runs `handler` for the jobs of `topic` (one handler per topic). */
  handle(topic: string, handler: Handler): this {
    this.handlers.set(topic, handler);
    return this;
  }

  /** Asks a running `run()` to stop gracefully (it resolves when done). */
  stop(): void {
    this.stopper?.abort();
  }

  /**
   * Reserves and runs jobs until `signal` aborts, `stop()` is called or
   * (unless `handleSignals: false`) SIGTERM/SIGINT arrives; then stops
   * reserving, gives back jobs not started, lets running handlers finish
   * within `graceMs`, flushes acks and nacks, and resolves.
   */
  async run(signal?: AbortSignal): Promise<void> {
    if (this.handlers.size === 0) throw new Error("Worker has no handler: call worker.handle(topic, fn) first");
    if (this.running) throw new Error("Worker is already running");
    this.running = true;
    const stopper = new AbortController();
    this.stopper = stopper;
    const stop = (): void => stopper.abort();
    if (signal?.aborted) stop();
    signal?.addEventListener("abort", stop, { once: true });
    const onSignal = (): void => stop();
    if (this.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const stopped = new Promise<void>((r) => stopper.signal.addEventListener("abort", () => r(), { once: true }));
    const graceOver = new AbortController();
    const topics = [...this.handlers.keys()];
    const inFlight = new Map<string, TouchItem>();
    const active = new Set<Promise<void>>();
    let slotFreed: (() => void) | null = null;
    const acks = new Reporter<AckItem>("ack", (b) => this.client.ackBatch(b, { retry: false }), this.warn);
    const nacks = new Reporter<NackItem>("nack", (b) => this.client.nackBatch(b, { retry: false }), this.warn);
    const keeper = setInterval(() => void this.extend(inFlight), Math.floor(this.leaseMs / 3));
    try {
      let failures = 0;
      while (!stopper.signal.aborted) {
        const free = this.concurrency - active.size;
        if (free <= 0) {
          await Promise.race([new Promise<void>((resolve) => (slotFreed = resolve)), stopped]);
          slotFreed = null;
          continue;
        }
        let jobs: Lease[];
        try {
          // Not aborted by a stop: what it returns is handed back below,
          // not stranded until its lease ends.
          jobs = await this.client.reserve(topics, {
            max: Math.min(free, this.batch),
            leaseMs: this.leaseMs,
            waitMs: this.waitMs,
            // a hung dq holds a stop up no longer than this
            timeoutMs: this.waitMs + 10_000,
            retry: false,
          });
          if (failures > 0) this.warn(`reserve works again after ${failures} failures`);
          failures = 0;
        } catch (e) {
          failures++;
          this.stats.reserveErrors++;
          if (failures === 1 || failures % 30 === 0) this.warn(`reserve failed (${failures}); retrying`, e);
          const retryAfter = e instanceof DqError ? e.retryAfterMs : undefined;
          await sleep(retryAfter ?? Math.min(100 * failures, isTransient(e) ? 2000 : 5000), stopper.signal);
          continue;
        }
        for (const job of jobs) {
          if (stopper.signal.aborted) {
            await this.handBack(job);
            continue;
          }
          const p: Promise<void> = this.execute(job, inFlight, acks, nacks, graceOver.signal).finally(() => {
            active.delete(p);
            slotFreed?.();
          });
          active.add(p);
        }
      }
      // Stopping: running handlers finish within the grace period.
      if (active.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        const graceEnds = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), this.graceMs)));
        const finished = await Promise.race([Promise.allSettled([...active]).then(() => true), graceEnds]);
        clearTimeout(timer);
        if (!finished) {
          this.warn(`${active.size} handlers still running after the ${this.graceMs} ms grace period; their jobs come back when their leases end`);
          graceOver.abort();
        }
      }
    } finally {
      clearInterval(keeper);
      await Promise.all([acks.close(), nacks.close()]);
      if (this.handleSignals) {
        process.removeListener("SIGTERM", onSignal);
        process.removeListener("SIGINT", onSignal);
      }
      signal?.removeEventListener("abort", stop);
      this.stopper = null;
      this.running = false;
    }
  }

  /** Runs one job's handler and reports its outcome. */
  private async execute(
    job: Lease,
    inFlight: Map<string, TouchItem>,
    acks: Reporter<AckItem>,
    nacks: Reporter<NackItem>,
    graceOver: AbortSignal,
  ): Promise<void> {
    const { topic, id, token } = job;
    const handler = this.handlers.get(topic)!;
    inFlight.set(token, { topic, id, token, leaseMs: this.leaseMs });
    let outcome: { ok: true } | { ok: false; error: unknown };
    try {
      await handler(job, { signal: graceOver });
      outcome = { ok: true };
    } catch (error) {
      outcome = { ok: false, error };
    } finally {
      inFlight.delete(token);
    }
    if (outcome.ok) {
      this.stats.done++;
      acks.push({ topic, id, token });
      return;
    }
    const e = outcome.error;
    if (e instanceof RetryLater) {
      this.stats.retried++;
      try {
        await this.client.release(topic, id, token, { delayMs: e.delayMs });
      } catch (err) {
        this.warn(`cannot give back ${topic}/${id}; it comes back when its lease ends`, err);
      }
      return;
    }
    const message = (e instanceof Error ? e.message : String(e)) || (e instanceof Error ? e.name : "error");
    if (e instanceof Dead) {
      this.stats.dead++;
      nacks.push({ topic, id, token, error: message, dead: true });
    } else {
      this.stats.failed++;
      nacks.push({ topic, id, token, error: message });
    }
  }

  /** Extends the leases of every running handler's job, in one call per 1000. */
  private async extend(inFlight: Map<string, TouchItem>): Promise<void> {
    const items = [...inFlight.values()];
    for (let i = 0; i < items.length; i += 1000) {
      const chunk = items.slice(i, i + 1000);
      try {
        const results = await this.client.touchBatch(chunk, { retry: false, timeoutMs: Math.max(1000, Math.floor(this.leaseMs / 3)) });
        results.forEach((r, j) => {
          if (r instanceof DqError && inFlight.has(chunk[j]!.token)) {
            this.warn(`cannot extend the lease of running job ${chunk[j]!.topic}/${chunk[j]!.id}: ${r.code}`, r);
          }
        });
      } catch (e) {
        this.warn(`cannot extend the leases of ${chunk.length} running jobs`, e);
      }
    }
  }

  private async handBack(job: Lease): Promise<void> {
    try {
      await this.client.release(job.topic, job.id, job.token, { delayMs: 0 });
      this.stats.handedBack++;
    } catch (e) {
      this.warn(`cannot give back ${job.topic}/${job.id} at the stop; it comes back when its lease ends`, e);
    }
  }
}
