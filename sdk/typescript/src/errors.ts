/**
 * Errors a handler returns to steer retries, and the reasons a handler's
 * AbortSignal fires (its `reason`).
 */

/** Marks an error as final: the job is dead-lettered at once, whatever attempts remain. */
export class PermanentError extends Error {
  override readonly name = "PermanentError";
  constructor(readonly error: unknown) {
    super(errorMessage(error), { cause: error });
  }
}

/**
 * Asks for the next attempt to wait `delayMs` instead of the job's backoff
 * (MIN_RETRY_DELAY_MS..MAX_RETRY_DELAY_MS). Ignored when no attempt remains.
 */
export class RetryAfterError extends Error {
  override readonly name = "RetryAfterError";
  readonly delayMs: number;
  constructor(delayMs: number, readonly error?: unknown) {
    const d = clampRetryDelay(delayMs);
    super(error === undefined ? `retry requested after ${formatDuration(d)}` : errorMessage(error), { cause: error });
    this.delayMs = d;
  }
}

/** MIN..MAX retry delay in ms, rounded up to a microsecond, as the Go SDK clamps. */
function clampRetryDelay(ms: number): number {
  if (!Number.isFinite(ms) || ms < 1) {
    return Number.isNaN(ms) || ms < 1 ? 1 : MAX_RETRY_DELAY;
  }
  return Math.min(Math.ceil(ms * 1000) / 1000, MAX_RETRY_DELAY);
}

const MAX_RETRY_DELAY = 366 * 24 * 3_600_000;

/** Wraps err so the job is dead-lettered at once (Go SDK: pulse.Permanent). */
export function permanent(err: unknown): PermanentError {
  return err instanceof PermanentError ? err : new PermanentError(err);
}

/**
 * Wraps err so the next attempt waits delayMs, clamped to 1 ms..366 days
 * (Go SDK: pulse.RetryAfter). permanent wins when both wrap an error.
 */
export function retryAfter(delayMs: number, err?: unknown): RetryAfterError {
  return new RetryAfterError(delayMs, err);
}

/** The reason of a handler's signal when an operator or producer canceled the job. */
export class JobCanceledError extends Error {
  override readonly name = "JobCanceledError";
  constructor() {
    super("pulse: job canceled");
  }
}

/**
 * The reason of a handler's signal when the worker no longer holds the
 * job's lease (the gateway says so, or no heartbeat succeeded for a whole
 * lease TTL). Another worker may already run the job: stop promptly.
 */
export class LeaseLostError extends Error {
  override readonly name = "LeaseLostError";
  constructor() {
    super("pulse: job lease lost");
  }
}

/** The reason of a handler's signal when the worker shuts down and the handler outlived the shutdown timeout. */
export class WorkerShutdownError extends Error {
  override readonly name = "WorkerShutdownError";
  constructor() {
    super("pulse: worker shutting down");
  }
}

/** The reason of a handler's signal when the attempt's timeout passed, and the attempt's error. */
export class JobTimeoutError extends Error {
  override readonly name = "JobTimeoutError";
  constructor(readonly timeoutMs: number, readonly error?: unknown) {
    const own = error === undefined || error instanceof JobTimeoutError || (error as Error)?.name === "AbortError";
    super(`timed out after ${formatDuration(timeoutMs)}` + (own ? "" : `: ${errorMessage(error)}`), { cause: error });
  }
}

/** The first error in err's cause chain that is an instance of cls. */
export function findInChain<T>(err: unknown, cls: abstract new (...args: any[]) => T): T | undefined {
  const seen = new Set<unknown>();
  for (let e: unknown = err; e !== undefined && e !== null && !seen.has(e); e = (e as { cause?: unknown }).cause) {
    seen.add(e);
    if (e instanceof cls) {
      return e;
    }
  }
  return undefined;
}

/**
 * Worker.run rejects with it when, before any gateway welcomed the worker,
 * every gateway refused it for what it is: credentials, worker id, topics.
 */
export class WorkerRefusedError extends Error {
  override readonly name = "WorkerRefusedError";
  constructor(message: string, readonly error: unknown) {
    super(message, { cause: error });
  }
}

/** Thrown when credentials would cross a plaintext connection beyond loopback. */
export class PlaintextCredentialsError extends Error {
  override readonly name = "PlaintextCredentialsError";
  constructor(target: string) {
    super(
      `pulse: refusing to send credentials over plaintext to an address that is not loopback: ${JSON.stringify(target)}; ` +
        "set tls, or allowPlaintextCredentials on a trusted network",
    );
  }
}

/** The text of an error or thrown value. */
export function errorMessage(err: unknown): string {
  try {
    if (err instanceof Error) {
      return typeof err.message === "string" ? err.message : String(err.message);
    }
    return String(err);
  } catch {
    return Object.prototype.toString.call(err); // a toString that throws, a Symbol's message …
  }
}

/** Go's time.Duration spelling for whole and fractional seconds: 1.5s, 300ms, 2m0s. */
export function formatDuration(ms: number): string {
  if (ms < 1000) {
    return `${ms}ms`;
  }
  if (ms < 60_000) {
    return `${ms / 1000}s`;
  }
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = (ms % 60_000) / 1000;
  return (h > 0 ? `${h}h` : "") + `${m}m${s}s`;
}
