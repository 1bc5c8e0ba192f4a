/**
 * The producer: enqueue jobs, read, cancel and retry them, and pause
 * dispatch, through control-api's gRPC API.
 */
import { create } from "@bufbuild/protobuf";
import {
  CancelJobRequestSchema,
  CancelJobResponseSchema,
  ControlService,
  GetJobRequestSchema,
  GetJobResponseSchema,
  ListJobsRequestSchema,
  ListJobsResponseSchema,
  RetryJobRequestSchema,
  RetryJobResponseSchema,
  SubmitJobRequestSchema,
  SubmitJobResponseSchema,
  SubmitJobsRequestSchema,
  SubmitJobsResponseSchema,
  type SubmitResult,
} from "./gen/pulse/v1/control_pb.js";
import {
  DispatchControlService,
  PauseDispatchRequestSchema,
  PauseDispatchResponseSchema,
  PauseMode,
  ResumeDispatchRequestSchema,
  ResumeDispatchResponseSchema,
  type ScopeState as ScopeStatePb,
} from "./gen/pulse/v1/dispatch_control_pb.js";
import {
  JobSpecSchema,
  JobStatus,
  ReplaceMode,
  RetryPolicySchema,
  type Job as JobPb,
  type JobSpec,
} from "./gen/pulse/v1/job_pb.js";
import { Conn, checkConn, type ConnOptions } from "./conn.js";
import {
  MAX_IDEMPOTENCY_KEY_BYTES,
  MAX_MAX_ATTEMPTS,
  MAX_PRIORITY,
  MAX_RETRY_DELAY_MS,
  MAX_TIMEOUT_MS,
  MAX_UNIQUE_FOR_MS,
  MIN_MAX_ATTEMPTS,
  MIN_PRIORITY,
  MIN_RETRY_DELAY_MS,
  MIN_TIMEOUT_MS,
  MIN_UNIQUE_FOR_MS,
  TOPIC_PATTERN,
} from "./limits.js";
import { utf8Length } from "./errtext.js";
import { durationFromMs, durationToMs, timestampFromDate, timestampToDate } from "./time.js";

/** rpcTimeoutMs bounds every producer call unless the caller's signal ends it first. */
const RPC_TIMEOUT_MS = 30_000;

/** Every option of a job, as the Go SDK's EnqueueOptions. Durations are milliseconds. */
export interface EnqueueOptions {
  /** MIN_PRIORITY..MAX_PRIORITY, higher runs first; unset is the server's default. */
  priority?: number;
  /** MIN_MAX_ATTEMPTS..MAX_MAX_ATTEMPTS; unset is the server's default. */
  maxAttempts?: number;
  /** The earliest time the job may start. The later-listed of runAt and delayMs wins: set one. */
  runAt?: Date;
  /** Start no earlier than delayMs after the call, by the producer's clock. */
  delayMs?: number;
  /** While a job with this key is live, enqueuing again returns that job as a duplicate. */
  idempotencyKey?: string;
  /** Bounds each attempt, MIN_TIMEOUT_MS..MAX_TIMEOUT_MS; the handler's signal fires at the deadline. */
  timeoutMs?: number;
  /** Unique by topic and args for this long, MIN_UNIQUE_FOR_MS..MAX_UNIQUE_FOR_MS. */
  uniqueForMs?: number;
  /** The job's own exponential backoff: about baseMs × 2^(n-1), at most maxMs (0: the server's cap). */
  exponentialBackoff?: { baseMs: number; maxMs?: number };
  /** The job's own fixed backoff between attempts. */
  fixedBackoffMs?: number;
  /**
   * Debounce: while a job of the topic enqueued with this key is pending and has never
   * started, enqueuing changes that job instead of adding one, as replaceMode says
   * ("replace", the default: args and run time; "keep_earlier_run_at"; "keep_first").
   * Not with idempotencyKey or uniqueForMs.
   */
  replaceKey?: string;
  replaceMode?: "replace" | "keep_earlier_run_at" | "keep_first";
  /** The key a topic rate-limited per job key counts this start under (1..255 bytes; docs/flow-control.md). */
  rateKey?: string;
  /** The key a topic's max_running_per_key counts this job under while it runs (1..255 bytes; docs/flow-control.md). */
  concurrencyKey?: string;
  /** Start only after every earlier job of the topic with this key has finished (1..255 bytes; the topic needs a sequence policy). */
  sequenceKey?: string;
}

/** One job for enqueueMany. */
export interface JobRequest {
  topic: string;
  /** JSON-encoded unless a Uint8Array (sent as is); undefined and null are {}. */
  args?: unknown;
  options?: EnqueueOptions;
}

/** The outcome of enqueuing one job. */
export interface Submitted {
  id: string;
  /** Nothing new was enqueued: id is an existing job's (idempotency key, uniqueFor or replaceKey). */
  duplicate: boolean;
  /** The replaceKey's pending job (id) took this job's args and run time. */
  replaced: boolean;
}

export type Status = "PENDING" | "RUNNING" | "RETRYING" | "COMPLETED" | "DEAD_LETTERED" | "CANCELED";

/** The stored state of a job. */
export interface JobInfo {
  id: string;
  topic: string;
  args: Uint8Array;
  priority: number;
  status: Status;
  attempts: number;
  maxAttempts: number;
  errors: { attempt: number; error: string; worker: string; at?: Date }[];
  lockedBy: string;
  leaseUntil?: Date;
  nextRunAt?: Date;
  submittedAt?: Date;
  startedAt?: Date;
  finishedAt?: Date;
  scheduleId: string;
  idempotencyKey: string;
  timeoutMs?: number;
  /** The job's own backoff; undefined when it follows the server's retry policy. */
  retry?: { baseMs?: number; maxMs?: number; fixedMs?: number };
}

/** One page of jobs. */
export interface ListOptions {
  topic?: string;
  status?: Status;
  limit?: number;
  pageToken?: string;
  includeArgs?: boolean;
}

/** What pauseDispatch does. */
export interface PauseRequest {
  /** Required, at most 500 characters. */
  reason: string;
  /** "drain" (default): running jobs run on; "quiesce": their checkpoints hold. */
  mode?: "drain" | "quiesce";
  /** One topic; unset pauses all dispatch. */
  topic?: string;
  /** Resume by itself after forMs, or at until (at most one). */
  forMs?: number;
  until?: Date;
}

export interface ScopeState {
  scope: string;
  paused: boolean;
  mode: "drain" | "quiesce" | "";
  reason: string;
  actor: string;
}

/** A producer connected to control-api's gRPC address (host:port). */
export class Client {
  private readonly conn: Conn;

  constructor(target: string, opts: ConnOptions = {}) {
    if (!target) {
      throw new Error("pulse: a control-api target is required");
    }
    checkConn(opts, [target]);
    this.conn = new Conn(target, opts);
  }

  /** Submits one job to topic. */
  async enqueue(topic: string, args?: unknown, options?: EnqueueOptions, signal?: AbortSignal): Promise<Submitted> {
    const job = buildJobSpec(topic, args, options);
    try {
      const res = await this.conn.unary(ControlService, "submitJob", SubmitJobRequestSchema, SubmitJobResponseSchema,
        create(SubmitJobRequestSchema, { job }), RPC_TIMEOUT_MS, signal);
      return submitted(res.result);
    } catch (err) {
      throw wrap(`enqueue ${topic}`, err);
    }
  }

  /** Submits jobs in one call that the server writes in one statement: all or none. Results are in request order. */
  async enqueueMany(jobs: JobRequest[], signal?: AbortSignal): Promise<Submitted[]> {
    if (jobs.length === 0) {
      return [];
    }
    const specs = jobs.map((j) => buildJobSpec(j.topic, j.args, j.options));
    try {
      const res = await this.conn.unary(ControlService, "submitJobs", SubmitJobsRequestSchema, SubmitJobsResponseSchema,
        create(SubmitJobsRequestSchema, { jobs: specs }), RPC_TIMEOUT_MS, signal);
      return res.results.map(submitted);
    } catch (err) {
      throw wrap(`enqueue ${jobs.length} jobs`, err);
    }
  }

  /** The stored state of job id. */
  async get(id: string, signal?: AbortSignal): Promise<JobInfo> {
    try {
      const res = await this.conn.unary(ControlService, "getJob", GetJobRequestSchema, GetJobResponseSchema,
        create(GetJobRequestSchema, { id }), RPC_TIMEOUT_MS, signal);
      return jobInfo(res.job!);
    } catch (err) {
      throw wrap(`get job ${id}`, err);
    }
  }

  /** One page of jobs, newest first, and the next page's token (empty on the last). */
  async list(opts: ListOptions = {}, signal?: AbortSignal): Promise<{ jobs: JobInfo[]; nextPageToken: string }> {
    try {
      const res = await this.conn.unary(ControlService, "listJobs", ListJobsRequestSchema, ListJobsResponseSchema,
        create(ListJobsRequestSchema, {
          topic: opts.topic ?? "",
          status: opts.status ? JobStatus[opts.status] : JobStatus.UNSPECIFIED,
          limit: opts.limit ?? 0,
          pageToken: opts.pageToken ?? "",
          includeArgs: opts.includeArgs ?? false,
        }), RPC_TIMEOUT_MS, signal);
      return { jobs: res.jobs.map(jobInfo), nextPageToken: res.nextPageToken };
    } catch (err) {
      throw wrap("list jobs", err);
    }
  }

  /** Moves a pending, retrying or running job to CANCELED; a running handler's signal fires with JobCanceledError. */
  async cancel(id: string, signal?: AbortSignal): Promise<JobInfo> {
    try {
      const res = await this.conn.unary(ControlService, "cancelJob", CancelJobRequestSchema, CancelJobResponseSchema,
        create(CancelJobRequestSchema, { id }), RPC_TIMEOUT_MS, signal);
      return jobInfo(res.job!);
    } catch (err) {
      throw wrap(`cancel job ${id}`, err);
    }
  }

  /** Moves a dead-lettered or canceled job back to PENDING with a fresh attempt budget. */
  async retry(id: string, signal?: AbortSignal): Promise<JobInfo> {
    try {
      const res = await this.conn.unary(ControlService, "retryJob", RetryJobRequestSchema, RetryJobResponseSchema,
        create(RetryJobRequestSchema, { id }), RPC_TIMEOUT_MS, signal);
      return jobInfo(res.job!);
    } catch (err) {
      throw wrap(`retry job ${id}`, err);
    }
  }

  /** Pauses dispatch (all, or one topic); returns the scope's state and whether it changed. */
  async pauseDispatch(req: PauseRequest, signal?: AbortSignal): Promise<{ state: ScopeState; changed: boolean }> {
    try {
      const res = await this.conn.unary(DispatchControlService, "pauseDispatch", PauseDispatchRequestSchema, PauseDispatchResponseSchema,
        create(PauseDispatchRequestSchema, {
          reason: req.reason,
          mode: req.mode === "quiesce" ? PauseMode.QUIESCE : PauseMode.DRAIN,
          topic: req.topic ?? "",
          pauseFor: req.forMs !== undefined ? durationFromMs(req.forMs) : undefined,
          until: req.until !== undefined ? timestampFromDate(req.until) : undefined,
        }), RPC_TIMEOUT_MS, signal);
      return { state: scopeState(res.state), changed: res.changed };
    } catch (err) {
      throw wrap("pause dispatch", err);
    }
  }

  /** Resumes dispatch (all when topic is empty, else that topic). */
  async resumeDispatch(topic = "", signal?: AbortSignal): Promise<{ state: ScopeState; changed: boolean }> {
    try {
      const res = await this.conn.unary(DispatchControlService, "resumeDispatch", ResumeDispatchRequestSchema, ResumeDispatchResponseSchema,
        create(ResumeDispatchRequestSchema, { topic }), RPC_TIMEOUT_MS, signal);
      return { state: scopeState(res.state), changed: res.changed };
    } catch (err) {
      throw wrap("resume dispatch", err);
    }
  }

  close(): void {
    this.conn.close();
  }
}

/** The wire form of one job, after the same checks as the Go SDK's; throws naming the option at fault. */
export function buildJobSpec(topic: string, args: unknown, o: EnqueueOptions = {}): JobSpec {
  checkTopic(topic);
  const spec = create(JobSpecSchema, { topic, args: encodeArgs(topic, args) });
  if (o.priority !== undefined) {
    checkInt("priority", o.priority, MIN_PRIORITY, MAX_PRIORITY);
    spec.priority = o.priority;
    spec.hasPriority = true;
  }
  if (o.maxAttempts !== undefined) {
    checkInt("maxAttempts", o.maxAttempts, MIN_MAX_ATTEMPTS, MAX_MAX_ATTEMPTS);
    spec.maxAttempts = o.maxAttempts;
  }
  if (o.runAt !== undefined && o.delayMs !== undefined) {
    throw new Error("pulse: set runAt or delayMs, not both");
  }
  if (o.runAt !== undefined) {
    if (!(o.runAt instanceof Date) || Number.isNaN(o.runAt.getTime())) {
      throw new Error("pulse: runAt is not a valid Date");
    }
    spec.runAt = timestampFromDate(o.runAt);
  }
  if (o.delayMs !== undefined) {
    if (!Number.isFinite(o.delayMs) || o.delayMs < 0) {
      throw new Error(`pulse: delayMs ${o.delayMs} must be a non-negative number`);
    }
    spec.runAt = timestampFromDate(new Date(Date.now() + o.delayMs));
  }
  if (o.idempotencyKey !== undefined && o.idempotencyKey !== "") {
    checkIdempotencyKey(o.idempotencyKey);
    spec.idempotencyKey = o.idempotencyKey;
  }
  if (o.timeoutMs !== undefined) {
    checkDuration("timeoutMs", o.timeoutMs, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS);
    spec.timeout = durationFromMs(o.timeoutMs);
  }
  if (o.uniqueForMs !== undefined) {
    checkDuration("uniqueForMs", o.uniqueForMs, MIN_UNIQUE_FOR_MS, MAX_UNIQUE_FOR_MS);
    spec.uniqueFor = durationFromMs(o.uniqueForMs);
  }
  if (o.exponentialBackoff !== undefined && o.fixedBackoffMs !== undefined) {
    throw new Error("pulse: set exponentialBackoff or fixedBackoffMs, not both");
  }
  if (o.exponentialBackoff !== undefined) {
    const { baseMs, maxMs = 0 } = o.exponentialBackoff;
    checkDuration("exponentialBackoff.baseMs", baseMs, MIN_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS);
    spec.retry = create(RetryPolicySchema, { base: durationFromMs(baseMs) });
    if (maxMs !== 0) {
      checkDuration("exponentialBackoff.maxMs", maxMs, MIN_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS);
      if (maxMs < baseMs) {
        throw new Error(`pulse: exponentialBackoff.maxMs ${maxMs} is below its baseMs ${baseMs}`);
      }
      spec.retry.max = durationFromMs(maxMs);
    }
  }
  if (o.fixedBackoffMs !== undefined) {
    checkDuration("fixedBackoffMs", o.fixedBackoffMs, MIN_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS);
    spec.retry = create(RetryPolicySchema, { fixed: durationFromMs(o.fixedBackoffMs) });
  }
  if (o.replaceKey !== undefined || o.replaceMode !== undefined) {
    if (!o.replaceKey) {
      throw new Error("pulse: replaceMode needs a replaceKey");
    }
    checkIdempotencyKey(o.replaceKey, "replaceKey");
    const mode = REPLACE_MODES[o.replaceMode ?? "replace"];
    if (mode === undefined) {
      throw new Error(`pulse: replaceMode ${JSON.stringify(o.replaceMode)} is not replace, keep_earlier_run_at or keep_first`);
    }
    spec.replaceKey = o.replaceKey;
    spec.replaceMode = mode;
  }
  if (o.rateKey !== undefined) {
    if (!o.rateKey) {
      throw new Error("pulse: rateKey is empty");
    }
    checkIdempotencyKey(o.rateKey, "rateKey");
    spec.rateKey = o.rateKey;
  }
  if (o.concurrencyKey !== undefined) {
    if (!o.concurrencyKey) {
      throw new Error("pulse: concurrencyKey is empty");
    }
    checkIdempotencyKey(o.concurrencyKey, "concurrencyKey");
    spec.concurrencyKey = o.concurrencyKey;
  }
  if (o.sequenceKey !== undefined) {
    if (!o.sequenceKey) {
      throw new Error("pulse: sequenceKey is empty");
    }
    checkIdempotencyKey(o.sequenceKey, "sequenceKey");
    spec.sequenceKey = o.sequenceKey;
  }
  return spec;
}

const REPLACE_MODES: Record<string, ReplaceMode | undefined> = {
  replace: ReplaceMode.REPLACE,
  keep_earlier_run_at: ReplaceMode.KEEP_EARLIER_RUN_AT,
  keep_first: ReplaceMode.KEEP_FIRST,
};

const encoder = new TextEncoder();

function encodeArgs(topic: string, args: unknown): Uint8Array {
  if (args === undefined || args === null) {
    return encoder.encode("{}");
  }
  if (args instanceof Uint8Array) {
    return args.length === 0 ? encoder.encode("{}") : args;
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(args);
  } catch (err) {
    throw new Error(`pulse: encode args for ${topic}: ${(err as Error).message}`);
  }
  if (json === undefined) {
    throw new Error(`pulse: encode args for ${topic}: ${typeof args} does not encode to JSON`);
  }
  return encoder.encode(json);
}

export function checkTopic(topic: string): void {
  if (typeof topic !== "string" || topic === "") {
    throw new Error("pulse: topic is required");
  }
  if (!TOPIC_PATTERN.test(topic)) {
    throw new Error(`pulse: topic ${JSON.stringify(topic)} must match ${TOPIC_PATTERN.source}`);
  }
}

function checkIdempotencyKey(key: string, what = "idempotencyKey"): void {
  if (key.includes("\u0000")) {
    throw new Error(`pulse: ${what} contains a NUL character`);
  }
  if (!key.isWellFormed()) {
    throw new Error(`pulse: ${what} is not valid UTF-8 (it has a lone surrogate)`);
  }
  if (utf8Length(key) > MAX_IDEMPOTENCY_KEY_BYTES) {
    throw new Error(`pulse: ${what} is ${utf8Length(key)} bytes, more than ${MAX_IDEMPOTENCY_KEY_BYTES}`);
  }
}

function checkInt(what: string, v: number, lo: number, hi: number): void {
  if (!Number.isInteger(v) || v < lo || v > hi) {
    throw new Error(`pulse: ${what} ${v} out of range ${lo}..${hi}`);
  }
}

export function checkDuration(what: string, ms: number, lo: number, hi: number): void {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < lo || ms > hi) {
    throw new Error(`pulse: ${what} ${ms} out of range ${lo}..${hi} (milliseconds)`);
  }
  const micros = ms * 1000;
  if (Math.abs(micros - Math.round(micros)) > 1e-6) {
    throw new Error(`pulse: ${what} ${ms} is finer than a microsecond`);
  }
}

function submitted(r: SubmitResult | undefined): Submitted {
  return { id: r?.id ?? "", duplicate: r?.duplicate ?? false, replaced: r?.replaced ?? false };
}

function jobInfo(j: JobPb): JobInfo {
  return {
    id: j.id,
    topic: j.topic,
    args: j.args,
    priority: j.priority,
    status: (JobStatus[j.status] ?? "UNSPECIFIED") as Status,
    attempts: j.attempts,
    maxAttempts: j.maxAttempts,
    errors: j.errors.map((e) => ({ attempt: e.attempt, error: e.error, worker: e.worker, at: timestampToDate(e.at) })),
    lockedBy: j.lockedBy,
    leaseUntil: timestampToDate(j.leaseUntil),
    nextRunAt: timestampToDate(j.nextRunAt),
    submittedAt: timestampToDate(j.submittedAt),
    startedAt: timestampToDate(j.startedAt),
    finishedAt: timestampToDate(j.finishedAt),
    scheduleId: j.scheduleId,
    idempotencyKey: j.idempotencyKey,
    timeoutMs: durationToMs(j.timeout),
    retry: j.retry === undefined ? undefined : { baseMs: durationToMs(j.retry.base), maxMs: durationToMs(j.retry.max), fixedMs: durationToMs(j.retry.fixed) },
  };
}

function scopeState(s: ScopeStatePb | undefined): ScopeState {
  const mode = s?.mode === PauseMode.QUIESCE ? "quiesce" : s?.mode === PauseMode.DRAIN ? "drain" : "";
  return { scope: s?.scope ?? "", paused: s?.paused ?? false, mode, reason: s?.reason ?? "", actor: s?.actor ?? "" };
}

/** An error with the call's context, keeping the gRPC code (err.code) of the original. */
function wrap(what: string, err: unknown): Error {
  const e = new Error(`pulse: ${what}: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  const code = (err as { code?: unknown })?.code;
  if (typeof code === "number") {
    (e as Error & { code: number }).code = code;
  }
  return e;
}
