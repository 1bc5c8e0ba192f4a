/**
 * The worker: pulls jobs from dispatch-gateway replicas over one
 * StreamJobs stream (assignments in, slot credits out), runs them with the
 * registered handlers, renews their leases with batched heartbeats and
 * reports their results in batches — the protocol of
 * proto/pulse/v1/dispatch.proto, as the Go SDK (pkg/pulse) speaks it.
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import type { ClientDuplexStream } from "@grpc/grpc-js";
import {
  CreditSchema,
  DispatchService,
  HeartbeatRequestSchema,
  HeartbeatResponseSchema,
  JobRefSchema,
  JobResultSchema,
  OpenStreamSchema,
  Outcome,
  ReportResultRequestSchema,
  ReportResultResponseSchema,
  StreamJobsRequestSchema,
  StreamJobsResponseSchema,
  type Assignment,
  type DispatchState,
  type HeartbeatResponse,
  type JobResult,
  type ResultAck,
  type StreamJobsRequest,
  type StreamJobsResponse,
  type Welcome,
} from "./gen/pulse/v1/dispatch_pb.js";
import { PauseMode } from "./gen/pulse/v1/dispatch_control_pb.js";
import { Code, Conn, checkConn, statusCode, type ConnOptions } from "./conn.js";
import {
  JobCanceledError,
  JobTimeoutError,
  LeaseLostError,
  PermanentError,
  RetryAfterError,
  WorkerRefusedError,
  WorkerShutdownError,
  errorMessage,
  findInChain,
} from "./errors.js";
import { sanitize, utf8Length } from "./errtext.js";
import { MAX_REPORTED_ERROR_BYTES, MAX_TIMEOUT_MS, MAX_WORKER_ID_BYTES, MIN_TIMEOUT_MS } from "./limits.js";
import { checkDuration, checkTopic } from "./client.js";
import { Backoff, aborted, sleep } from "./backoff.js";
import { jsonLogger, withAttrs, type Logger } from "./log.js";
import { RunningJobs, SlotLedger, type JobKey } from "./running.js";
import { durationFromMs, durationToMs, timestampToDate } from "./time.js";

/** Defaults, as the Go SDK's. */
export const DEFAULT_CONCURRENCY = 10;
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_REPORT_BATCH = 1000;

// Lease terms assumed before a gateway's Welcome (the gateway's defaults).
const DEFAULT_LEASE_TTL_MS = 30_000;
const DEFAULT_HEARTBEAT_INTERVAL_MS = 10_000;
// Reconnect backoff, jittered so a gateway restart does not bring every worker back at once.
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5_000;
// How long a stopping worker waits for the gateway to end its half-closed stream.
const HALF_CLOSE_GRACE_MS = 3_000;
// How many ReportResult calls may be in flight, and their retry backoff.
const REPORT_CONCURRENCY = 2;
const REPORT_RETRY_MIN_MS = 50;
const REPORT_RETRY_MAX_MS = 2_000;
// Bounds every unary call.
const RPC_TIMEOUT_MS = 10_000;
// How long a handler whose timeout passed may take to return on its own.
const TIMEOUT_GRACE_MS = 1_000;
// After the shutdown timeout, how long handlers get after their signal fires.
const CANCEL_GRACE_MS = 5_000;
// Bounds the final delivery of queued results.
const FLUSH_TIMEOUT_MS = 10_000;

/** One attempt of a job, as a handler sees it. */
export interface Job {
  readonly id: string;
  readonly attempt: number;
  readonly topic: string;
  /** The args, parsed from JSON. */
  readonly args: unknown;
  /** The args as sent. */
  readonly rawArgs: Uint8Array;
  readonly priority: number;
  readonly maxAttempts: number;
  readonly submittedAt?: Date;
  /** The lease's expiry when the job was assigned. */
  readonly leaseUntil?: Date;
  /** The attempt's timeout (the job's, else the topic's), if any. */
  readonly timeoutMs?: number;
  /** W3C trace context of the span that submitted the job. */
  readonly traceparent: string;
  readonly tracestate: string;
  /**
   * Fires when the attempt should stop; its reason says why: JobCanceledError,
   * LeaseLostError, JobTimeoutError or WorkerShutdownError.
   */
  readonly signal: AbortSignal;
  /**
   * A safe point: while an operator has paused the job's scope in quiesce
   * mode it waits (the lease keeps being renewed); it rejects with the
   * signal's reason once the attempt is stopped.
   */
  checkpoint(): Promise<void>;
}

/**
 * Runs one attempt. Resolving completes the job; throwing fails the
 * attempt, retried with backoff while attempts remain — throw
 * permanent(err) to dead-letter at once, retryAfter(ms, err) to choose the
 * wait.
 */
export type Handler = (job: Job) => Promise<void> | void;

/**
 * Wraps a handler: it can act before and after it, or turn its error into
 * another (Worker.use). It runs inside the attempt, with the same job.
 */
export type Middleware = (next: Handler) => Handler;

export interface RegisterOptions {
  /** The topic's default timeout for jobs without their own, MIN_TIMEOUT_MS..MAX_TIMEOUT_MS. */
  timeoutMs?: number;
}

export interface WorkerOptions extends ConnOptions {
  /** Stored as the jobs' locked_by; default hostname-pid-<random>, unique per process. */
  workerId?: string;
  /** Handlers run at once; the gateway never sends more jobs than free slots. */
  concurrency?: number;
  /** How long a drain waits for running handlers before their signals fire with WorkerShutdownError. */
  shutdownTimeoutMs?: number;
  /** Most results in one ReportResult call. */
  maxReportBatch?: number;
  /**
   * How many finished attempts may wait for their results to settle after
   * their slots went back (default: the concurrency; 0: a slot waits for its
   * result). The worker holds at most concurrency + settleBehind leases.
   */
  settleBehind?: number;
  /** Default: JSON lines on stderr, info and up. */
  logger?: Logger;
}

export interface RunOptions {
  /** Stops the worker (drain) when it aborts. */
  signal?: AbortSignal;
  /** Process signals that start a drain; default SIGTERM and SIGINT, [] for none. */
  stopOn?: NodeJS.Signals[];
}

interface TopicHandler {
  handler: Handler;
  timeoutMs?: number;
}

/** Pulls jobs from dispatch-gateways and runs them with the registered handlers. Register, then run once. */
export class Worker {
  readonly id: string;
  private readonly targets: string[];
  private readonly opts: WorkerOptions;
  private readonly concurrency: number;
  private readonly shutdownTimeoutMs: number;
  private readonly maxReportBatch: number;
  private readonly settleBehind: number;
  private readonly log: Logger;
  private readonly handlers = new Map<string, TopicHandler>();
  private readonly middleware: Middleware[] = [];
  private started = false;

  constructor(targets: string[], opts: WorkerOptions = {}) {
    if (!Array.isArray(targets) || targets.length === 0) {
      throw new Error("pulse: at least one dispatch-gateway target is required");
    }
    targets.forEach((t, i) => {
      if (typeof t !== "string" || t === "") {
        throw new Error(`pulse: dispatch-gateway target ${i} is empty`);
      }
    });
    this.concurrency = opts.concurrency ?? DEFAULT_CONCURRENCY;
    if (!Number.isInteger(this.concurrency) || this.concurrency <= 0) {
      throw new Error(`pulse: concurrency must be a positive integer, got ${opts.concurrency}`);
    }
    this.shutdownTimeoutMs = opts.shutdownTimeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS;
    if (!Number.isFinite(this.shutdownTimeoutMs) || this.shutdownTimeoutMs < 0) {
      throw new Error(`pulse: shutdownTimeoutMs must not be negative, got ${opts.shutdownTimeoutMs}`);
    }
    this.maxReportBatch = opts.maxReportBatch ?? DEFAULT_MAX_REPORT_BATCH;
    if (!Number.isInteger(this.maxReportBatch) || this.maxReportBatch <= 0) {
      throw new Error(`pulse: maxReportBatch must be a positive integer, got ${opts.maxReportBatch}`);
    }
    this.settleBehind = opts.settleBehind ?? this.concurrency;
    if (!Number.isInteger(this.settleBehind) || this.settleBehind < 0) {
      throw new Error(`pulse: settleBehind must be a non-negative integer, got ${opts.settleBehind}`);
    }
    const id = opts.workerId ?? defaultWorkerId();
    if (id === "") {
      throw new Error("pulse: workerId must not be empty");
    }
    if (utf8Length(id) > MAX_WORKER_ID_BYTES) {
      throw new Error(`pulse: workerId is ${utf8Length(id)} bytes; the limit is ${MAX_WORKER_ID_BYTES}`);
    }
    checkConn(opts, targets);
    this.id = id;
    this.targets = [...targets];
    this.opts = opts;
    this.log = withAttrs(opts.logger ?? jsonLogger(), { worker_id: id });
  }

  /** Runs handler for jobs of topic. Mistakes (a bad topic, a topic twice, after run) throw. */
  register(topic: string, handler: Handler, opts: RegisterOptions = {}): void {
    checkTopic(topic);
    if (typeof handler !== "function") {
      throw new Error(`pulse: register ${JSON.stringify(topic)} with a handler that is not a function`);
    }
    if (opts.timeoutMs !== undefined) {
      checkDuration("timeoutMs", opts.timeoutMs, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS);
    }
    if (this.started) {
      throw new Error(`pulse: register ${JSON.stringify(topic)} after run started`);
    }
    if (this.handlers.has(topic)) {
      throw new Error(`pulse: topic ${JSON.stringify(topic)} registered twice`);
    }
    this.handlers.set(topic, { handler, timeoutMs: opts.timeoutMs });
  }

  /**
   * Wraps every handler in middleware, the first outermost: use(a, b) runs
   * a, which calls b, which calls the handler. It applies to handlers
   * registered before or after it; after run it throws.
   */
  use(...middleware: Middleware[]): void {
    if (this.started) {
      throw new Error("pulse: use after run started");
    }
    middleware.forEach((m, i) => {
      if (typeof m !== "function") {
        throw new Error(`pulse: use with a middleware that is not a function (argument ${i})`);
      }
    });
    this.middleware.push(...middleware);
  }

  /**
   * Receives and runs jobs until stopped (opts.signal, or SIGTERM/SIGINT),
   * then drains: takes no new work, waits up to the shutdown timeout for
   * running handlers, stops the rest with WorkerShutdownError, reports
   * every result it can, and closes its connections. It rejects only for
   * misuse (nothing registered, a second run) or WorkerRefusedError: every
   * gateway refused the worker before any welcomed it. Gateway outages are
   * logged and survived.
   */
  async run(opts: RunOptions = {}): Promise<void> {
    if (this.started) {
      throw new Error("pulse: worker already started");
    }
    if (this.handlers.size === 0) {
      throw new Error("pulse: no handlers registered");
    }
    this.started = true;
    const handlers = new Map<string, TopicHandler>();
    for (const [topic, th] of this.handlers) {
      let h = th.handler;
      for (let i = this.middleware.length - 1; i >= 0; i--) {
        h = this.middleware[i]!(h);
        if (typeof h !== "function") {
          throw new Error(`pulse: middleware ${i} returned a handler that is not a function for topic ${JSON.stringify(topic)}`);
        }
      }
      handlers.set(topic, { handler: h, timeoutMs: th.timeoutMs });
    }
    const stop = new AbortController();
    const onSignal = (sig: NodeJS.Signals) => {
      if (!stop.signal.aborted) {
        this.log.info("stop signal received, draining", { signal: sig });
      }
      stop.abort();
    };
    const signals = opts.stopOn ?? ["SIGTERM", "SIGINT"];
    for (const s of signals) {
      process.on(s, onSignal);
    }
    const onStop = () => stop.abort();
    if (opts.signal?.aborted) {
      stop.abort();
    }
    opts.signal?.addEventListener("abort", onStop, { once: true });

    const pool = new GatewayPool(this.targets, this.opts);
    const terms = new LeaseTerms();
    const running = new RunningJobs();
    const ledger = new SlotLedger();
    const reporter = new Reporter(pool, terms, this.id, this.maxReportBatch, this.log);
    const dispatch = new DispatchWatch(running, this.log);
    const heartbeater = new Heartbeater(pool, terms, running, dispatch, this.id, this.log);
    const executor = new Executor(handlers, this.concurrency, this.settleBehind, running, ledger, reporter, terms, heartbeater, this.log);
    const stream = new StreamLoop(pool, terms, ledger, executor, dispatch, this.id, [...this.handlers.keys()].sort(), this.concurrency, this.log);
    dispatch.onPushed = () => heartbeater.kick();
    terms.onChange = () => heartbeater.reschedule();
    heartbeater.start();
    this.log.info("worker started", { count: this.handlers.size });
    let runErr: unknown;
    try {
      await stream.run(stop.signal);
    } catch (err) {
      runErr = err;
    }
    try {
      await this.windDown(executor, running);
      heartbeater.stop();
      await reporter.flush(FLUSH_TIMEOUT_MS);
    } finally {
      pool.close();
      for (const s of signals) {
        process.off(s, onSignal);
      }
      opts.signal?.removeEventListener("abort", onStop);
    }
    if (runErr !== undefined) {
      this.log.error("worker stopped: refused", { error: errorMessage(runErr) });
      throw runErr;
    }
    this.log.info("worker stopped");
  }

  private async windDown(executor: Executor, running: RunningJobs): Promise<void> {
    if (running.size > 0) {
      this.log.info("shutting down, waiting for running jobs", { count: running.size });
    }
    if (await executor.idleWithin(this.shutdownTimeoutMs)) {
      return;
    }
    const n = running.cancelAll(() => new WorkerShutdownError());
    this.log.warn("shutdown timeout reached, canceling running jobs", { count: n });
    if (!(await executor.idleWithin(CANCEL_GRACE_MS))) {
      this.log.error("handlers ignored cancellation; their results will be dropped", { count: running.size });
    }
  }
}

function defaultWorkerId(): string {
  return `${hostname() || "worker"}-${process.pid}-${randomBytes(3).toString("hex")}`;
}

/** The lease TTL and heartbeat interval of the latest Welcome. */
class LeaseTerms {
  ttlMs = DEFAULT_LEASE_TTL_MS;
  intervalMs = DEFAULT_HEARTBEAT_INTERVAL_MS;
  onChange: () => void = () => {};

  update(w: Welcome): void {
    const ttl = durationToMs(w.leaseTtl);
    const interval = durationToMs(w.heartbeatInterval);
    if (ttl !== undefined && ttl > 0) {
      this.ttlMs = ttl;
    }
    if (interval !== undefined && interval > 0) {
      this.intervalMs = interval;
    }
    this.onChange();
  }
}

/** One connection per gateway target, and which one the worker streams from. */
class GatewayPool {
  private readonly conns: Conn[];
  private cur = 0;
  private rotated = false;

  constructor(
    readonly targets: string[],
    opts: ConnOptions,
  ) {
    this.conns = targets.map((t) => new Conn(t, opts));
  }

  /** Makes the next target current, round-robin from the first, and returns it. */
  rotate(): [string, Conn] {
    if (this.rotated) {
      this.cur = (this.cur + 1) % this.conns.length;
    }
    this.rotated = true;
    return [this.targets[this.cur]!, this.conns[this.cur]!];
  }

  /** The gateway the stream uses (heartbeats and results go there too). */
  current(): Conn {
    return this.conns[this.cur]!;
  }

  get size(): number {
    return this.conns.length;
  }

  close(): void {
    for (const c of this.conns) {
      c.close();
    }
  }
}

/**
 * Follows the pause state the gateways report, on the stream and in
 * heartbeat answers: applies a newer state's quiesced scopes at once and,
 * when the stream announces a change, asks for a heartbeat now.
 */
class DispatchWatch {
  private version = 0n;
  private wasPaused = false;
  onPushed: () => void = () => {};

  constructor(
    private readonly running: RunningJobs,
    private readonly log: Logger,
  ) {}

  /** Takes a state; reports whether it is current (no older than the newest seen). */
  observe(st: DispatchState | undefined, fromStream: boolean): boolean {
    if (st === undefined) {
      return true;
    }
    const newer = st.version > this.version;
    const current = st.version >= this.version;
    const paused = st.pausedScopes.length > 0;
    if (newer) {
      this.version = st.version;
      const scopes = new Set<string>();
      for (const s of st.pausedScopes) {
        if (s.paused && s.mode === PauseMode.QUIESCE) {
          scopes.add(s.scope);
        }
      }
      this.running.applyQuiesce(scopes);
      if (paused) {
        this.log.info("dispatch paused by an operator; this worker's paused topics get no new jobs", {
          version: st.version,
          paused: st.paused,
          scopes: st.pausedScopes.map((s) => ({ scope: s.scope, mode: s.mode === PauseMode.QUIESCE ? "quiesce" : "drain", reason: s.reason })),
        });
      } else if (this.wasPaused) {
        this.log.info("dispatch resumed", { version: st.version });
      }
      this.wasPaused = paused;
      if (fromStream) {
        this.onPushed();
      }
    }
    return current;
  }
}

/**
 * Renews the leases of every held attempt with one Heartbeat per interval,
 * and stops handlers whose lease is gone: the gateway says so (lost or
 * canceled), or no renewal succeeded for a whole lease TTL.
 */
class Heartbeater {
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private beating = false;
  private again = false;
  private readonly log: Logger;

  constructor(
    private readonly pool: GatewayPool,
    private readonly terms: LeaseTerms,
    private readonly running: RunningJobs,
    private readonly dispatch: DispatchWatch,
    private readonly workerId: string,
    log: Logger,
  ) {
    this.log = withAttrs(log, { component: "heartbeater" });
  }

  start(): void {
    this.reschedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** Restarts the interval (new terms). */
  reschedule(): void {
    clearTimeout(this.timer);
    if (!this.stopped && !this.beating) {
      this.timer = setTimeout(() => void this.tick(), this.terms.intervalMs);
    }
  }

  /** Beats now (a pause or resume: refresh the quiesce flags). */
  kick(): void {
    if (this.beating) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    void this.tick();
  }

  private async tick(): Promise<void> {
    if (this.stopped) {
      return;
    }
    this.beating = true;
    try {
      await this.beat();
    } finally {
      this.beating = false;
    }
    if (this.again) {
      this.again = false;
      void this.tick();
      return;
    }
    this.reschedule();
  }

  private async beat(): Promise<void> {
    const refs = this.running.refs();
    if (refs.length === 0) {
      return;
    }
    const sentAt = performance.now();
    let resp: HeartbeatResponse | undefined;
    try {
      resp = await this.pool.current().unary(DispatchService, "heartbeat", HeartbeatRequestSchema, HeartbeatResponseSchema,
        create(HeartbeatRequestSchema, { workerId: this.workerId, jobs: refs.map((k) => create(JobRefSchema, { jobId: k.id, attempt: k.attempt })) }),
        Math.min(RPC_TIMEOUT_MS, this.terms.ttlMs));
    } catch (err) {
      if (this.stopped) {
        return;
      }
      this.log.warn("heartbeat failed", { count: refs.length, error: errorMessage(err) });
    }
    this.apply(resp, sentAt);
    for (const k of this.running.giveUpStale(performance.now(), this.terms.ttlMs, () => new LeaseLostError())) {
      this.log.error("lease presumed lost: not renewed within the lease TTL", { job_id: k.id, attempt: k.attempt });
    }
  }

  /** Acts on the gateway's answer for each attempt; no answer renews nothing. */
  apply(resp: HeartbeatResponse | undefined, sentAt: number): void {
    const current = this.dispatch.observe(resp?.dispatchState, false);
    for (const r of resp?.results ?? []) {
      const k = { id: r.jobId, attempt: r.attempt };
      if (r.canceled) {
        if (this.running.giveUp(k, new JobCanceledError())) {
          this.log.info("job canceled, stopping its handler", { job_id: k.id, attempt: k.attempt });
        }
      } else if (!r.leaseHeld) {
        if (this.running.giveUp(k, new LeaseLostError())) {
          this.log.warn("lease lost, stopping its handler", { job_id: k.id, attempt: k.attempt });
        }
      } else {
        this.running.renewed(k, timestampToDate(r.leaseUntil)?.getTime() ?? 0, sentAt);
        if (current) {
          this.running.setQuiesced(k, r.quiesced);
        }
      }
    }
  }

  /** Asks a gateway whether the attempt's lease is still held (renewing it if so); any doubt is no. */
  async confirm(k: JobKey): Promise<boolean> {
    const sentAt = performance.now();
    let resp: HeartbeatResponse;
    try {
      resp = await this.pool.current().unary(DispatchService, "heartbeat", HeartbeatRequestSchema, HeartbeatResponseSchema,
        create(HeartbeatRequestSchema, { workerId: this.workerId, jobs: [create(JobRefSchema, { jobId: k.id, attempt: k.attempt })] }),
        Math.min(RPC_TIMEOUT_MS, this.terms.ttlMs));
    } catch (err) {
      this.log.warn("could not confirm a stale-looking lease; not starting the attempt", { job_id: k.id, attempt: k.attempt, error: errorMessage(err) });
      return false;
    }
    this.apply(resp, sentAt);
    const r = resp.results.find((x) => x.jobId === k.id && x.attempt === k.attempt);
    return r !== undefined && r.leaseHeld && !r.canceled;
  }
}

interface Pending {
  result: JobResult;
  producedAt: number;
  settled: () => void;
}

/**
 * Sends results in batches with no linger: whatever is queued goes out,
 * up to maxBatch, with at most REPORT_CONCURRENCY calls in flight. A batch
 * whose call fails is retried until each result is a lease TTL old (by
 * then the reaper owns the job). Refused results (the fence did not
 * match) are logged, never retried.
 */
class Reporter {
  private queue: Pending[] = [];
  private inFlight = 0;
  private closing = false;
  private closed = false;
  private readonly flushAbort = new AbortController();
  private idleWaiters: (() => void)[] = [];
  private readonly log: Logger;

  constructor(
    private readonly pool: GatewayPool,
    private readonly terms: LeaseTerms,
    private readonly workerId: string,
    private readonly maxBatch: number,
    log: Logger,
  ) {
    this.log = withAttrs(log, { component: "reporter" });
  }

  /** Queues a result; settled is called once when it is acknowledged or given up on. */
  submit(result: JobResult, settled: () => void): void {
    if (this.closed) {
      settled();
      this.log.error("result produced after shutdown, dropped; the job will be retried after its lease expires", { job_id: result.jobId, attempt: result.attempt });
      return;
    }
    this.queue.push({ result, producedAt: performance.now(), settled });
    this.pump();
  }

  /** Sends everything queued, within timeoutMs; later results are dropped. */
  async flush(timeoutMs: number): Promise<void> {
    this.closing = true;
    const timer = setTimeout(() => this.flushAbort.abort(), timeoutMs);
    try {
      while (this.queue.length > 0 || this.inFlight > 0) {
        await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      }
    } finally {
      clearTimeout(timer);
      this.closed = true;
    }
  }

  private pump(): void {
    while (this.inFlight < REPORT_CONCURRENCY && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.inFlight++;
      void this.send(batch).finally(() => {
        this.inFlight--;
        this.pump();
        if (this.queue.length === 0 && this.inFlight === 0) {
          const waiters = this.idleWaiters;
          this.idleWaiters = [];
          waiters.forEach((w) => w());
        }
      });
    }
  }

  private async send(batch: Pending[]): Promise<void> {
    const bo = new Backoff(REPORT_RETRY_MIN_MS, REPORT_RETRY_MAX_MS);
    for (;;) {
      const req = create(ReportResultRequestSchema, { workerId: this.workerId, results: batch.map((p) => p.result) });
      try {
        const resp = await this.pool.current().unary(DispatchService, "reportResult", ReportResultRequestSchema, ReportResultResponseSchema,
          req, RPC_TIMEOUT_MS, this.flushAbort.signal);
        this.logRejected(resp.acks);
        settleAll(batch);
        return;
      } catch (err) {
        if (this.flushAbort.signal.aborted) {
          this.logDropped(batch, "worker stopped before results could be reported", err);
          return;
        }
        batch = this.dropExpired(batch, err);
        if (batch.length === 0) {
          return;
        }
        const delay = bo.next();
        this.log.warn("report results failed, retrying", { count: batch.length, delay_ms: delay, error: errorMessage(err) });
        if (!(await sleep(delay, this.flushAbort.signal))) {
          this.logDropped(batch, "worker stopped before results could be reported", err);
          return;
        }
      }
    }
  }

  private dropExpired(batch: Pending[], err: unknown): Pending[] {
    const now = performance.now();
    const keep: Pending[] = [];
    const expired: Pending[] = [];
    for (const p of batch) {
      (now - p.producedAt > this.terms.ttlMs ? expired : keep).push(p);
    }
    this.logDropped(expired, "result not reported within the lease TTL; the reaper will retry the job", err);
    return keep;
  }

  private logDropped(batch: Pending[], reason: string, err: unknown): void {
    for (const p of batch) {
      this.log.error("result dropped: " + reason, { job_id: p.result.jobId, attempt: p.result.attempt, error: err === undefined ? undefined : errorMessage(err) });
    }
    settleAll(batch);
  }

  private logRejected(acks: ResultAck[]): void {
    for (const a of acks) {
      if (a.code !== Code.OK) {
        this.log.warn("result rejected", { job_id: a.jobId, attempt: a.attempt, code: Code[a.code] ?? a.code, error: a.message });
      }
    }
  }
}

function settleAll(batch: Pending[]): void {
  for (const p of batch) {
    p.settled();
  }
}

type Outcome_ = { ok: true } | { ok: false; error: unknown };

/**
 * Runs assignments: at most concurrency handlers at once, each with a stop
 * signal the heartbeater can fire. When a handler returns, its result is
 * queued and its slot freed: at once while fewer than settleBehind results
 * wait to settle, else once its own result settled.
 */
class Executor {
  private active = 0;
  private readonly slotWaiters: (() => void)[] = [];
  private behind = 0;
  private tasks = 0;
  private idleWaiters: (() => void)[] = [];
  private readonly log: Logger;
  private readonly decoder = new TextDecoder();

  constructor(
    private readonly handlers: Map<string, TopicHandler>,
    private readonly concurrency: number,
    private readonly settleBehindCap: number,
    private readonly running: RunningJobs,
    private readonly ledger: SlotLedger,
    private readonly reporter: Reporter,
    private readonly terms: LeaseTerms,
    private readonly heartbeater: Heartbeater,
    log: Logger,
  ) {
    this.log = withAttrs(log, { component: "executor" });
  }

  /** Runs one assignment; a claimed job is never dropped (extra jobs wait for a slot). */
  start(a: Assignment): void {
    const key: JobKey = { id: a.jobId, attempt: a.attempt };
    const abort = new AbortController();
    const leaseUntil = timestampToDate(a.leaseUntil)?.getTime() ?? 0;
    if (!this.running.add(key, a.topic, abort, leaseUntil, performance.now())) {
      this.log.error("gateway sent an attempt that is already running; ignoring the copy", { job_id: key.id, attempt: key.attempt });
      this.ledger.assigned();
      this.ledger.finished();
      return;
    }
    const held = this.ledger.assigned();
    if (held > this.concurrency) {
      this.log.error("gateway sent more jobs than free slots; the extra job waits for a slot", { job_id: key.id, count: held });
    }
    const job = this.job(a, key, abort.signal);
    this.tasks++;
    this.process(job, key, abort)
      .catch((err: unknown) => this.log.error("attempt bookkeeping failed; the job will be retried after its lease expires", { job_id: key.id, attempt: key.attempt, error: errorMessage(err) }))
      .finally(() => this.taskDone());
  }

  private async process(job: JobImpl, key: JobKey, abort: AbortController): Promise<void> {
    const { outcome, overran, abandoned } = await this.execute(job, key, abort);
    this.running.remove(key);
    if (abandoned) {
      this.log.warn("abandoned an attempt whose lease expired before its handler started; this worker was stalled (stopped, frozen, or starved) for longer than the lease",
        { job_id: key.id, attempt: key.attempt });
      this.ledger.finished();
      return;
    }
    let settled = () => this.ledger.finished();
    if (overran) {
      this.tasks++;
      settled = () => void overran.finally(() => {
        this.ledger.finished();
        this.taskDone();
      });
    } else if (this.behind < this.settleBehindCap) {
      this.behind++;
      this.ledger.finished();
      settled = () => {
        this.behind--;
      };
    }
    this.reporter.submit(resultOf(job, outcome), settled);
  }

  private async execute(job: JobImpl, key: JobKey, abort: AbortController): Promise<{ outcome: Outcome_; overran?: Promise<void>; abandoned?: boolean }> {
    const stopped = (): Outcome_ => ({ ok: false, error: new Error(`pulse: job stopped before it started: ${errorMessage(abort.signal.reason)}`) });
    if (abort.signal.aborted) {
      return { outcome: stopped() };
    }
    if (!(await this.acquire(abort.signal))) {
      return { outcome: stopped() };
    }
    let released = false;
    const release = () => {
      if (!released) {
        released = true;
        this.releaseSlot();
      }
    };
    if (!(await this.startable(key))) {
      release();
      return { outcome: { ok: true }, abandoned: true };
    }
    const th = this.handlers.get(job.topic);
    if (!th) {
      release();
      return { outcome: { ok: false, error: new Error(`pulse: no handler registered for topic ${JSON.stringify(job.topic)}`) } };
    }
    if (job.argsError !== undefined) {
      release();
      return { outcome: { ok: false, error: new PermanentError(job.argsError) } };
    }
    if (job.timeoutMs === undefined || job.timeoutMs <= 0) {
      try {
        return { outcome: await call(th.handler, job) };
      } finally {
        release();
      }
    }
    return this.callWithTimeout(th.handler, job, abort, release);
  }

  /**
   * Runs the handler with the job's timeout: at the deadline its signal
   * fires with a JobTimeoutError and the attempt has failed, whatever it
   * returns later; it gets TIMEOUT_GRACE_MS to return, else the attempt is
   * reported now and its slot stays taken until it does return.
   */
  private async callWithTimeout(h: Handler, job: JobImpl, abort: AbortController, release: () => void) {
    const timeoutMs = job.timeoutMs!;
    const timeout = new JobTimeoutError(timeoutMs);
    const timer = setTimeout(() => abort.abort(timeout), timeoutMs);
    let outcome: Outcome_ | undefined;
    const done = call(h, job).then((o) => {
      outcome = o;
    }).finally(() => {
      clearTimeout(timer);
      release();
    });
    const timedOut = () => abort.signal.reason === timeout;
    const failed = (): Outcome_ => ({ ok: false, error: new JobTimeoutError(timeoutMs, outcome && !outcome.ok ? outcome.error : undefined) });
    await Promise.race([done, aborted(abort.signal)]);
    if (outcome !== undefined) {
      return { outcome: timedOut() ? failed() : outcome };
    }
    if (!timedOut()) {
      await done; // stopped for another reason: wait for the handler as without a timeout
      return { outcome: outcome! };
    }
    if (await Promise.race([done.then(() => true), sleep(TIMEOUT_GRACE_MS).then(() => false)])) {
      return { outcome: failed() };
    }
    this.log.warn("handler still running after its timeout; the attempt failed, and its slot stays taken until the handler returns (handlers should return when their signal fires)",
      { job_id: job.id, attempt: job.attempt, topic: job.topic, timeout_ms: timeoutMs });
    return { outcome: { ok: false, error: timeout } as Outcome_, overran: done };
  }

  /**
   * Whether a held attempt may still start: a worker stalled past its lease
   * (SIGSTOP, a frozen VM) must not run an attempt the reaper may have
   * handed on. Either clock doubting the lease asks the gateway.
   */
  private async startable(key: JobKey): Promise<boolean> {
    const l = this.running.lease(key);
    if (!l) {
      return false;
    }
    const ttl = this.terms.ttlMs;
    if (performance.now() - l.renewedAt < (ttl * 3) / 4 && Date.now() < l.leaseUntil - ttl / 4) {
      return true;
    }
    return this.heartbeater.confirm(key);
  }

  private acquire(signal: AbortSignal): Promise<boolean> {
    if (this.active < this.concurrency) {
      this.active++;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const take = () => {
        signal.removeEventListener("abort", onAbort);
        resolve(true);
      };
      const onAbort = () => {
        const i = this.slotWaiters.indexOf(take);
        if (i >= 0) {
          this.slotWaiters.splice(i, 1);
        }
        resolve(false);
      };
      this.slotWaiters.push(take);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  private releaseSlot(): void {
    const next = this.slotWaiters.shift();
    if (next) {
      next(); // the slot passes straight to the next waiter
    } else {
      this.active--;
    }
  }

  private taskDone(): void {
    if (--this.tasks === 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      waiters.forEach((w) => w());
    }
  }

  /** Whether every started job finished within ms. */
  async idleWithin(ms: number): Promise<boolean> {
    if (this.tasks === 0) {
      return true;
    }
    const idle = new Promise<boolean>((resolve) => this.idleWaiters.push(() => resolve(true)));
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    try {
      return await Promise.race([idle, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private job(a: Assignment, key: JobKey, signal: AbortSignal): JobImpl {
    const timeoutMs = durationToMs(a.timeout) ?? this.handlers.get(a.topic)?.timeoutMs;
    let args: unknown;
    let argsError: Error | undefined;
    try {
      args = a.args.length === 0 ? {} : JSON.parse(this.decoder.decode(a.args));
    } catch (err) {
      argsError = new Error(`pulse: job args are not JSON: ${errorMessage(err)}`);
    }
    return new JobImpl(a, key, args, argsError, timeoutMs, signal, this.running);
  }
}

class JobImpl implements Job {
  readonly id: string;
  readonly attempt: number;
  readonly topic: string;
  readonly rawArgs: Uint8Array;
  readonly priority: number;
  readonly maxAttempts: number;
  readonly submittedAt?: Date;
  readonly leaseUntil?: Date;
  readonly traceparent: string;
  readonly tracestate: string;

  constructor(
    a: Assignment,
    private readonly key: JobKey,
    readonly args: unknown,
    readonly argsError: Error | undefined,
    readonly timeoutMs: number | undefined,
    readonly signal: AbortSignal,
    private readonly running: RunningJobs,
  ) {
    this.id = a.jobId;
    this.attempt = a.attempt;
    this.topic = a.topic;
    this.rawArgs = a.args;
    this.priority = a.priority;
    this.maxAttempts = a.maxAttempts;
    this.submittedAt = timestampToDate(a.submittedAt);
    this.leaseUntil = timestampToDate(a.leaseUntil);
    this.traceparent = a.traceparent;
    this.tracestate = a.tracestate;
  }

  async checkpoint(): Promise<void> {
    for (;;) {
      if (this.signal.aborted) {
        throw this.signal.reason;
      }
      if (!this.running.quiesced(this.key)) {
        return;
      }
      await Promise.race([this.running.changed(), aborted(this.signal)]);
    }
  }
}

/** Runs h, turning a throw (or a rejected promise) into a failed outcome. */
async function call(h: Handler, job: Job): Promise<Outcome_> {
  try {
    await h(job);
    return { ok: true };
  } catch (error) {
    return { ok: false, error };
  }
}

/** The wire result of an attempt. Permanent wins over retry-after. */
export function resultOf(job: { id: string; attempt: number }, outcome: Outcome_): JobResult {
  const res = create(JobResultSchema, { jobId: job.id, attempt: job.attempt, outcome: Outcome.COMPLETE });
  if (outcome.ok) {
    return res;
  }
  res.error = sanitize(errorMessage(outcome.error), MAX_REPORTED_ERROR_BYTES);
  if (findInChain(outcome.error, PermanentError)) {
    res.outcome = Outcome.FAIL_PERMANENT;
    return res;
  }
  res.outcome = Outcome.FAIL;
  const ra = findInChain(outcome.error, RetryAfterError);
  if (ra) {
    res.retryAfter = durationFromMs(ra.delayMs);
  }
  return res;
}

/**
 * Keeps one StreamJobs stream open to some gateway: opens it, hands
 * assignments to the executor, returns freed slots as credits, and moves to
 * the next target when it breaks, while running handlers carry on.
 */
class StreamLoop {
  private readonly log: Logger;

  constructor(
    private readonly pool: GatewayPool,
    private readonly terms: LeaseTerms,
    private readonly ledger: SlotLedger,
    private readonly executor: Executor,
    private readonly dispatch: DispatchWatch,
    private readonly workerId: string,
    private readonly topics: string[],
    private readonly concurrency: number,
    log: Logger,
  ) {
    this.log = withAttrs(log, { component: "stream" });
  }

  /**
   * Streams until stop aborts; then half-closes, so the gateway sends what
   * it already claimed and ends the stream. Until some gateway has welcomed
   * the worker, a refusal from every target in a row rejects with
   * WorkerRefusedError; after that it reconnects through anything.
   */
  async run(stop: AbortSignal): Promise<void> {
    const bo = new Backoff(RECONNECT_MIN_MS, RECONNECT_MAX_MS, true);
    let everWelcomed = false;
    let refusals = 0;
    for (;;) {
      const [target, conn] = this.pool.rotate();
      const { welcomed, error } = await this.session(stop, conn, target);
      if (stop.aborted) {
        return;
      }
      if (welcomed) {
        bo.reset();
        everWelcomed = true;
      }
      if (!everWelcomed) {
        if (!refused(error)) {
          refusals = 0;
        } else if (++refusals >= this.pool.size) {
          throw new WorkerRefusedError(`pulse: every gateway refused the worker (last: ${target}): ${errorMessage(error)}`, error);
        }
      }
      const delay = bo.next();
      if (refused(error)) {
        this.log.error("gateway refused the worker, reconnecting", { target, delay_ms: Math.round(delay), error: errorMessage(error) });
      } else {
        this.log.warn("job stream lost, reconnecting", { target, delay_ms: Math.round(delay), error: errorMessage(error) });
      }
      if (!(await sleep(delay, stop))) {
        return;
      }
    }
  }

  private session(stop: AbortSignal, conn: Conn, target: string): Promise<{ welcomed: boolean; error?: unknown }> {
    if (stop.aborted) {
      return Promise.resolve({ welcomed: false });
    }
    return new Promise((resolve) => {
      let welcomed = false;
      let ended = false;
      let halfClosed = false;
      let graceTimer: NodeJS.Timeout | undefined;
      let call: ClientDuplexStream<StreamJobsRequest, StreamJobsResponse>;
      // Slots freed in one turn of the event loop (a burst of handlers
      // returning) go out as one Credit, so the gateway claims for them in
      // one statement rather than one each.
      let creditScheduled = false;
      const scheduleCredits = () => {
        if (!creditScheduled) {
          creditScheduled = true;
          setImmediate(() => {
            creditScheduled = false;
            sendCredits();
          });
        }
      };
      const sendCredits = () => {
        if (!welcomed || halfClosed || ended) {
          return;
        }
        const n = this.ledger.takeUnsent();
        if (n > 0) {
          call.write(create(StreamJobsRequestSchema, { msg: { case: "credit", value: create(CreditSchema, { slots: n }) } }));
        }
      };
      const onStop = () => {
        if (ended || halfClosed) {
          return;
        }
        halfClosed = true;
        call.end(); // no more credits: the gateway sends what it claimed and ends the stream
        graceTimer = setTimeout(() => call.cancel(), HALF_CLOSE_GRACE_MS);
      };
      const finish = (error?: unknown) => {
        if (ended) {
          return;
        }
        ended = true;
        clearTimeout(graceTimer);
        stop.removeEventListener("abort", onStop);
        this.ledger.onFreed = () => {};
        resolve({ welcomed, error });
      };
      try {
        call = conn.bidi(DispatchService, "streamJobs", StreamJobsRequestSchema, StreamJobsResponseSchema);
      } catch (err) {
        resolve({ welcomed: false, error: err });
        return;
      }
      const inFlight = this.ledger.opened();
      call.on("data", (msg: StreamJobsResponse) => {
        if (!welcomed) {
          if (msg.msg.case !== "welcome") {
            call.cancel();
            finish(new Error("protocol error: first message is not a welcome"));
            return;
          }
          welcomed = true;
          this.terms.update(msg.msg.value);
          this.log.info("job stream open", { target, gateway_id: msg.msg.value.gatewayId, in_flight: inFlight });
          this.ledger.onFreed = scheduleCredits;
          sendCredits();
          return;
        }
        switch (msg.msg.case) {
          case "welcome":
            this.terms.update(msg.msg.value); // a gateway may revise its terms mid-stream
            break;
          case "dispatchState":
            this.dispatch.observe(msg.msg.value, true);
            break;
          case "assignments":
            for (const a of msg.msg.value.jobs) {
              this.executor.start(a);
            }
            break;
        }
      });
      call.on("error", (err: unknown) => finish(err));
      call.on("status", (st: { code: number; details: string }) => {
        finish(st.code === Code.OK ? new Error("stream ended by the gateway") : Object.assign(new Error(st.details), { code: st.code }));
      });
      call.write(create(StreamJobsRequestSchema, {
        msg: {
          case: "open",
          value: create(OpenStreamSchema, { workerId: this.workerId, topics: this.topics, concurrency: this.concurrency, inFlight }),
        },
      }));
      stop.addEventListener("abort", onStop, { once: true });
    });
  }
}

/** A gateway turning the worker away for what it is, which reconnecting cannot change. */
function refused(err: unknown): boolean {
  if (err === undefined) {
    return false;
  }
  switch (statusCode(err)) {
    case Code.UNAUTHENTICATED:
    case Code.PERMISSION_DENIED:
    case Code.INVALID_ARGUMENT:
    case Code.ALREADY_EXISTS:
      return true;
    default:
      return false;
  }
}
