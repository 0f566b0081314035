/** Errors of the dq client and the outcomes a worker handler can throw. */

/** dq answered with an error: HTTP `status`, dq's machine-readable `code`, its `message`. */
export class DqError extends Error {
  /** HTTP status (for an item of a batch: the status the single call would have had). */
  readonly status: number;
  /** dq's stable error code, e.g. `invalid_delay`, `job_not_found`, `lease_mismatch`. */
  readonly code: string;
  /** The server's `Retry-After`, in milliseconds, when it sent one. */
  readonly retryAfterMs: number | undefined;

  constructor(status: number, code: string, message: string, retryAfterMs?: number) {
    super(message);
    this.name = "DqError";
    this.status = status;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
  }

  /** Whether trying again later may succeed (a 503: store unavailable, shutting down, …). */
  get transient(): boolean {
    return this.status === 503;
  }
}

/** dq could not be reached, the connection broke, the call timed out, or the reply was not JSON. */
export class TransportError extends Error {
  /** The underlying error's code (`ECONNREFUSED`, `ECONNRESET`, `ETIMEDOUT`, …), when known. */
  readonly errno: string | undefined;
  /** True when the request certainly never reached dq (connection refused, name not resolved). */
  readonly notSent: boolean;

  constructor(message: string, options: { cause?: unknown; errno?: string; notSent?: boolean } = {}) {
    super(message, { cause: options.cause });
    this.name = "TransportError";
    this.errno = options.errno;
    this.notSent = options.notSent ?? false;
  }

  /** Transport errors are worth retrying. */
  get transient(): boolean {
    return true;
  }
}

/**
 * Thrown by a worker handler: the job failed for good and goes to the dead
 * letters at once (nack with `dead: true`), whatever attempts are left.
 */
export class Dead extends Error {
  constructor(message = "dead", options?: { cause?: unknown }) {
    super(message, options);
    this.name = "Dead";
  }
}

/**
 * Thrown by a worker handler: not now. The job is given back (`release`),
 * due again after `delayMs`; the attempt is not counted.
 */
export class RetryLater extends Error {
  readonly delayMs: number;

  constructor(delayMs: number, message = `retry in ${delayMs} ms`) {
    super(message);
    this.name = "RetryLater";
    this.delayMs = Math.max(0, Math.round(delayMs));
  }
}

/** Whether `e` is an error after which trying again may succeed. */
export function isTransient(e: unknown): boolean {
  return (e instanceof DqError && e.status === 503) || e instanceof TransportError;
}

/** The error of one refused item of a batch, as the single call would have raised it. */
export function itemError(e: { code?: string; message?: string } | undefined): DqError {
  const code = e?.code ?? "";
  const message = e?.message ?? "";
  let status = 400;
  if (code === "job_not_found" || code === "topic_not_found") status = 404;
  else if (code === "lease_mismatch" || code === "not_in_state") status = 409;
  else if (code.startsWith("store_")) status = 503;
  else if (code === "forbidden") status = 403;
  return new DqError(status, code, message);
}
