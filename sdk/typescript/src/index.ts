/**
 * pulse for Node.js: a producer (Client) that enqueues jobs through
 * control-api, and a Worker that runs them, speaking the dispatch-gateway
 * protocol (proto/pulse/v1) exactly as the Go SDK does.
 */
export { Client, buildJobSpec } from "./client.js";
export type { EnqueueOptions, JobInfo, JobRequest, ListOptions, PauseRequest, ScopeState, Status, Submitted } from "./client.js";
export { Worker, DEFAULT_CONCURRENCY, DEFAULT_MAX_REPORT_BATCH, DEFAULT_SHUTDOWN_TIMEOUT_MS } from "./worker.js";
export type { Handler, Job, Middleware, RegisterOptions, RunOptions, WorkerOptions } from "./worker.js";
export type { ConnOptions, TlsOptions } from "./conn.js";
export {
  JobCanceledError,
  JobTimeoutError,
  LeaseLostError,
  PermanentError,
  PlaintextCredentialsError,
  RetryAfterError,
  WorkerRefusedError,
  WorkerShutdownError,
  permanent,
  retryAfter,
} from "./errors.js";
export { jsonLogger, silentLogger } from "./log.js";
export type { Logger } from "./log.js";
export * from "./limits.js";
