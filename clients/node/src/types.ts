/** The shapes of dq's requests and replies, in camelCase (the wire is snake_case). */

/** A job's state. */
export type JobState = "scheduled" | "ready" | "reserved" | "dead";

/** Any JSON value. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** Retry waits after failed attempts (one of the three forms). */
export type RetryPolicy =
  | { exponential: { initialMs: number; factor: number; maxMs: number; jitter?: number } }
  | { fixedMs: number }
  | { delaysMs: number[] };

/** What a job body can be given as. `RawJson` sends JSON text exactly; bytes go as `body_base64`. */
export type Body = unknown;

/** Options of an enqueue (the wire names in camelCase; all optional). */
export interface EnqueueOptions {
  /** Idempotency key; without one dq generates a UUIDv7. */
  id?: string;
  /** Due after this many ms (not with `dueAtMs`). */
  delayMs?: number;
  /** Due at this Unix ms (in the past: due now). */
  dueAtMs?: number;
  /** Lower first; default 1024. */
  priority?: number;
  /** Attempts before the job goes dead (default: the topic's). */
  maxAttempts?: number;
  /** Lease length of this job's hand-outs (default: the topic's). */
  leaseMs?: number;
  /** Retry waits of this job (default: the topic's). */
  retry?: RetryPolicy;
  /** Rewrite a waiting job with this id. */
  replace?: boolean;
  /** Dedup window (wire `dedup_ms`): for this long after the job ended, its id enqueues nothing. */
  dedupMs?: number;
  /** Alias of `dedupMs`. */
  dedupWindowMs?: number;
  /** Flow-control key (customer, tenant). */
  key?: string;
  /** Aborts the call. */
  signal?: AbortSignal;
}

/** One job of `enqueueBatch`: its body and its options. */
export interface BatchJob extends Omit<EnqueueOptions, "signal"> {
  body?: Body;
}

/** The reply to an enqueue. */
export interface Enqueued {
  id: string;
  /** False when the id existed (nothing changed), was replaced, or was deduplicated. */
  created: boolean;
  replaced: boolean;
  /** True when the id ended within its dedup window: nothing stored. */
  deduplicated?: boolean;
  dueAtMs?: number;
  state?: JobState;
}

/** Body fields common to jobs as read and as reserved. */
export interface BodyFields {
  /**
   * The JSON body as `JSON.parse` reads it (numbers beyond 2^53 lose
   * precision: use `bodyText` for those); `undefined` for a body of bytes.
   */
  body?: unknown;
  /** The JSON body's exact text as it was sent; `undefined` for a body of bytes. */
  bodyText?: string;
  /** A body sent as bytes (`body_base64`), decoded; `undefined` for a JSON body. */
  bodyBytes?: Buffer;
  /** The wire's `body_base64`, when the body is bytes. */
  bodyBase64?: string;
}

/** A job as `get` (and the dead letters) show it. */
export interface Job extends BodyFields {
  topic: string;
  id: string;
  state: JobState;
  dueAtMs: number;
  priority: number;
  attempts: number;
  maxAttempts?: number;
  leaseMs?: number;
  lastError?: string | null;
  /** Its last failed attempts (at most ten), oldest first; left out when none failed. */
  errors?: { attempt: number; atMs: number; error: string }[];
  createdAtMs?: number;
  leaseDeadlineMs?: number | null;
  diedAtMs?: number | null;
  key?: string;
}

/** A reserved job: what `reserve` hands out and a worker handler gets. */
export interface Lease extends BodyFields {
  topic: string;
  id: string;
  /** The lease: pass it to ack, nack, touch, release. */
  token: string;
  /** Which hand-out this is (1 for the first). */
  attempt: number;
  dueAtMs: number;
  leaseDeadlineMs: number;
  priority: number;
}

/** Options of `reserve`. */
export interface ReserveOptions {
  /** Up to this many jobs (1–1000; default 1). */
  max?: number;
  /** Lease length (default: the job's, then the topic's). */
  leaseMs?: number;
  /** Wait up to this long for a job to fall due (0–30000; default 0). */
  waitMs?: number;
  signal?: AbortSignal;
  /** Per-call timeout (default: the client's, and at least `waitMs` + 10 s). */
  timeoutMs?: number;
}

/** Options of `nack`. */
export interface NackOptions {
  /** The error text kept as `last_error` (up to 4 KiB). */
  error?: string;
  /** Due again after this long (instead of the retry policy's wait). */
  retryInMs?: number;
  /** Dead at once, whatever attempts are left. */
  dead?: boolean;
  signal?: AbortSignal;
}

/** The reply to a nack. */
export interface Nacked {
  id?: string;
  state: JobState;
  dueAtMs?: number;
}

export interface AckItem {
  topic: string;
  id: string;
  token: string;
}

export interface NackItem extends AckItem {
  error?: string;
  retryInMs?: number;
  dead?: boolean;
  /** The job's new priority from here on. */
  priority?: number;
}

export interface TouchItem extends AckItem {
  leaseMs?: number;
}

export interface RateLimit {
  limit: number;
  perMs: number;
  burst?: number | null;
}

/** A topic's delivery: pull (default), push, or forwarding into Redis. */
export type Delivery =
  | { mode: "pull" }
  | {
      mode: "push";
      url: string;
      method?: "POST" | "GET";
      timeoutMs?: number;
      concurrency?: number;
      headers?: Record<string, string>;
      secrets?: string[];
    }
  | { mode: "redis_stream"; url: string; stream: string; maxlen?: number; fields?: "flat" | "json" }
  | { mode: "redis_list"; url: string; list: string; side?: "left" | "right"; payload?: "body" | "envelope" }
  | Record<string, unknown>;

/** A change of a topic's settings: fields left out keep their value; `null` removes a limit. */
export interface TopicConfigPatch {
  maxAttempts?: number;
  leaseMs?: number;
  deadCap?: number;
  defaultDelayMs?: number;
  retry?: RetryPolicy;
  delivery?: Delivery;
  partitions?: number;
  dedupMs?: number;
  paused?: boolean;
  rateLimit?: RateLimit | null;
  keyConcurrency?: number | null;
  keyRateLimit?: RateLimit | null;
}

/** A topic's settings as in force. */
export interface TopicConfig {
  maxAttempts: number;
  leaseMs: number;
  deadCap: number;
  defaultDelayMs: number;
  retry: RetryPolicy;
  delivery: Delivery;
  partitions?: number;
  dedupMs?: number;
  paused?: boolean;
  rateLimit?: RateLimit;
  keyConcurrency?: number;
  keyRateLimit?: RateLimit;
}

export interface TopicCounters {
  enqueued: number;
  acked: number;
  failed: number;
  expired: number;
  dead: number;
  cancelled: number;
  deadDropped: number;
  replayed: number;
  rateLimited: number;
}

export interface TopicStats {
  scheduled: number;
  ready: number;
  reserved: number;
  dead: number;
  oldestOverdueMs: number;
  counters: TopicCounters;
  partial?: boolean;
  missing?: string[];
  pausedUntilMs?: number;
}

export interface TopicInfo {
  name: string;
  config: TopicConfig;
  /** Where each setting of `config` comes from: the default for the topic's delivery mode, or set. */
  configSources: Partial<Record<keyof TopicConfig, "default" | "set">>;
  stats: TopicStats;
}

export interface TopicPage {
  topics: { name: string; stats: TopicStats }[];
  /** Pass as `cursor` for the next page; null on the last. */
  nextCursor: string | null;
}

/** A schedule's settings (wire `ScheduleSpec`). */
export interface ScheduleSpec {
  topic: string;
  /** A cron rule (5 or 6 fields); or `every`. */
  cron?: string;
  /** An interval: `90s`, `5m`, `2h`, `1d`; or `cron`. */
  every?: string;
  timezone?: string;
  body?: unknown;
  priority?: number;
  catchUp?: "skip" | "one" | "all";
  paused?: boolean;
  /** RFC 3339. */
  startAt?: string;
  endAt?: string;
}

export interface Slot {
  at: string;
  atMs: number;
}

export interface ScheduleInfo {
  name: string;
  spec: ScheduleSpec;
  rule: string;
  last?: Slot;
  lastJob?: { id: string; state?: JobState };
  next: Slot[];
}

/** Options every call takes. */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}
