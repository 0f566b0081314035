/** @dq/client: a client and a worker for dq, the delay-queue HTTP service. */
export { Client, RawJson, encodeSegment } from "./client.js";
export type { ClientOptions } from "./client.js";
export { Worker } from "./worker.js";
export type { Handler, WorkerOptions, WorkerStats } from "./worker.js";
export { DqError, TransportError, Dead, RetryLater, isTransient } from "./errors.js";
export type {
  AckItem,
  BatchJob,
  Body,
  BodyFields,
  CallOptions,
  Delivery,
  Enqueued,
  EnqueueOptions,
  Job,
  JobState,
  JsonValue,
  Lease,
  NackItem,
  NackOptions,
  Nacked,
  RateLimit,
  ReserveOptions,
  RetryPolicy,
  ScheduleInfo,
  ScheduleSpec,
  Slot,
  TopicConfig,
  TopicConfigPatch,
  TopicCounters,
  TopicInfo,
  TopicPage,
  TopicStats,
  TouchItem,
} from "./types.js";
