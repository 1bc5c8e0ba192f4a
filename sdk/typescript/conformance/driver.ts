/**
 * The TypeScript SDK's conformance driver: a worker whose handler does
 * what each job's args say and prints what happened as JSON lines on
 * stdout, for the conformance suite (e2e/conformance). The contract — its
 * environment variables, job ops and event lines — is
 * docs/sdk-conformance.md.
 */
import { Worker, permanent, retryAfter, JobCanceledError, JobTimeoutError, LeaseLostError, WorkerShutdownError, type Job } from "../src/index.js";

const MAX_EVENT_ERROR = 200;

interface Config {
  gateways: string[];
  topics: string[];
  workerId: string;
  concurrency: number;
  shutdownTimeoutMs: number;
  user?: string;
  password?: string;
}

function list(v: string | undefined): string[] {
  return (v ?? "").split(",").map((s) => s.trim()).filter((s) => s !== "");
}

export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const c: Config = {
    gateways: list(env.PULSE_GATEWAY_ADDRS),
    topics: list(env.PULSE_TOPICS),
    workerId: env.PULSE_WORKER_ID ?? "",
    concurrency: 1,
    shutdownTimeoutMs: 10_000,
    user: env.PULSE_USER || undefined,
    password: env.PULSE_PASSWORD,
  };
  if (c.gateways.length === 0) throw new Error("PULSE_GATEWAY_ADDRS is required (comma-separated gateway addresses)");
  if (c.topics.length === 0) throw new Error("PULSE_TOPICS is required (comma-separated topics)");
  if (c.workerId === "") throw new Error("PULSE_WORKER_ID is required");
  if (env.PULSE_CONCURRENCY) {
    const n = Number(env.PULSE_CONCURRENCY);
    if (!Number.isInteger(n) || n < 1) throw new Error(`PULSE_CONCURRENCY must be a positive integer, got ${JSON.stringify(env.PULSE_CONCURRENCY)}`);
    c.concurrency = n;
  }
  if (env.PULSE_SHUTDOWN_TIMEOUT_MS) {
    const n = Number(env.PULSE_SHUTDOWN_TIMEOUT_MS);
    if (!Number.isInteger(n) || n < 0) throw new Error(`PULSE_SHUTDOWN_TIMEOUT_MS must be a non-negative integer of milliseconds, got ${JSON.stringify(env.PULSE_SHUTDOWN_TIMEOUT_MS)}`);
    c.shutdownTimeoutMs = n;
  }
  return c;
}

function emit(ev: Record<string, unknown>): void {
  if (typeof ev.error === "string" && ev.error.length > MAX_EVENT_ERROR) {
    ev.error = ev.error.slice(0, MAX_EVENT_ERROR);
  }
  process.stdout.write(JSON.stringify(ev) + "\n");
}

function reason(r: unknown): string {
  if (r instanceof JobCanceledError) return "canceled";
  if (r instanceof LeaseLostError) return "lease_lost";
  if (r instanceof JobTimeoutError) return "timeout";
  if (r instanceof WorkerShutdownError) return "shutdown";
  return "unknown";
}

/** Prints why the attempt was stopped and returns its reason, to throw. */
function abortedEvent(job: Job): unknown {
  const r = job.signal.reason;
  emit({ event: "aborted", job: job.id, attempt: job.attempt, reason: reason(r), detail: r instanceof Error ? r.message : String(r) });
  return r;
}

function sleep(job: Job, ms: number): Promise<void> {
  return new Promise((resolve, reject) => {
    if (job.signal.aborted) {
      reject(abortedEvent(job));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortedEvent(job));
    };
    const timer = setTimeout(() => {
      job.signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    job.signal.addEventListener("abort", onAbort, { once: true });
  });
}

function waitAbort(job: Job): Promise<void> {
  return new Promise((resolve) => {
    if (job.signal.aborted) resolve();
    else job.signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

interface Args {
  op?: string;
  ms?: number;
  steps?: number;
  bytes?: number;
  message?: string;
  until_attempt?: number;
}

async function run(job: Job): Promise<void> {
  const a = (job.args ?? {}) as Args;
  const message = a.message || "failed as asked";
  switch (a.op) {
    case "complete":
      return;
    case "sleep":
      return sleep(job, a.ms ?? 0);
    case "fail":
      if (a.until_attempt && job.attempt >= a.until_attempt) return;
      throw new Error(message);
    case "fail_permanent":
      throw permanent(new Error(message));
    case "retry_after":
      if (job.attempt > 1) return;
      throw retryAfter(a.ms ?? 0, new Error(message));
    case "wait_cancel":
      await waitAbort(job);
      throw abortedEvent(job);
    case "checkpoint":
      for (let i = 1; i <= (a.steps ?? 0); i++) {
        await sleep(job, a.ms ?? 0);
        try {
          await job.checkpoint();
        } catch {
          throw abortedEvent(job);
        }
        emit({ event: "checkpoint", job: job.id, attempt: job.attempt, n: i });
      }
      return;
    case "hang_past_lease":
      if (job.attempt > 1) throw permanent(new Error("second attempt"));
      await waitAbort(job);
      abortedEvent(job);
      return; // a success the gateway must refuse: the lease is gone
    case "huge_error":
      throw permanent(new Error("x".repeat(a.bytes ?? 0)));
    case "bad_utf8_error":
      throw permanent(new Error("bad-utf8:\uD800-\uDC00:end")); // lone surrogates: no UTF-8 for them
    case "nul_error":
      throw permanent(new Error("nul:\u0000:end"));
    default:
      throw permanent(new Error(`unknown op ${JSON.stringify(a.op)}`));
  }
}

async function handle(job: Job): Promise<void> {
  emit({ event: "started", job: job.id, attempt: job.attempt, topic: job.topic });
  try {
    await run(job);
    emit({ event: "finished", job: job.id, attempt: job.attempt, result: "complete" });
  } catch (err) {
    const name = (err as Error)?.name;
    const result = name === "PermanentError" ? "fail_permanent" : name === "RetryAfterError" ? "retry_after" : "fail";
    emit({ event: "finished", job: job.id, attempt: job.attempt, result, error: err instanceof Error ? err.message : String(err) });
    throw err;
  }
}

async function main(): Promise<void> {
  let cfg: Config;
  try {
    cfg = loadConfig(process.env);
  } catch (err) {
    process.stderr.write(`driver: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const w = new Worker(cfg.gateways, {
    workerId: cfg.workerId,
    concurrency: cfg.concurrency,
    shutdownTimeoutMs: cfg.shutdownTimeoutMs,
    user: cfg.user,
    password: cfg.password,
  });
  for (const t of cfg.topics) {
    w.register(t, handle);
  }
  emit({ event: "ready", sdk: "typescript", worker_id: cfg.workerId });
  try {
    await w.run();
  } catch (err) {
    emit({ event: "stopped" });
    process.stderr.write(`driver: worker failed: ${(err as Error).message}\n`);
    process.exit(1);
  }
  emit({ event: "stopped" });
}

await main();
