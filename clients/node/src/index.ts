/** @dq/client: a client and a worker for dq, the delay-queue HTTP service. */
export { Client, RawJson, encodeSegment } from "./client.js";
export type { ClientOptions } from "./client.js";
export { Worker } from "./worker.js";
export type { Handler, WorkerOptions, WorkerStats } from "./worker.js";
export { DqError, TransportError, Dead, RetryLater, isTransient } from "./errors.js";
export type * from "./types.js";
