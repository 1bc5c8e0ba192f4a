import { test } from "node:test";
import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { Worker, permanent, retryAfter, silentLogger, JobCanceledError, LeaseLostError, WorkerRefusedError, type Job } from "../src/index.js";
import { Outcome } from "../src/gen/pulse/v1/dispatch_pb.js";
import { durationToMs } from "../src/time.js";
import { FakeGateway, waitFor } from "./fakegateway.js";

/** A promise and its resolver. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

test("the worker opens with its slots, runs assignments, reports each outcome and credits the freed slots", async (t) => {
  const gw = new FakeGateway();
  await gw.start();
  t.after(() => gw.forceStop());
  const w = new Worker([gw.address], { workerId: "w-1", concurrency: 3, logger: silentLogger });
  w.register("t", async (job: Job) => {
    const { op } = job.args as { op: string };
    if (op === "fail") throw permanent(new Error("hopeless"));
    if (op === "later") throw retryAfter(1500, new Error("later"));
  });
  const stop = new AbortController();
  const run = w.run({ signal: stop.signal, stopOn: [] });
  await waitFor("the open", () => gw.opens.length === 1);
  assert.equal(gw.opens[0]!.workerId, "w-1");
  assert.deepEqual(gw.opens[0]!.topics, ["t"]);
  assert.equal(gw.opens[0]!.concurrency, 3);
  assert.equal(gw.opens[0]!.inFlight, 0);
  gw.assign({ id: "a", args: { op: "ok" } }, { id: "b", args: { op: "fail" } }, { id: "c", args: { op: "later" } });
  await waitFor("three results", () => gw.results.length === 3);
  const byId = Object.fromEntries(gw.results.map((r) => [r.jobId, r]));
  assert.equal(byId.a!.outcome, Outcome.COMPLETE);
  assert.equal(byId.b!.outcome, Outcome.FAIL_PERMANENT);
  assert.equal(byId.b!.error, "hopeless");
  assert.equal(byId.c!.outcome, Outcome.FAIL);
  assert.equal(durationToMs(byId.c!.retryAfter), 1500);
  await waitFor("three slots credited", () => gw.credits.reduce((a, b) => a + b, 0) === 3);
  stop.abort();
  await run;
  assert.equal(gw.halfCloses, 1, "a stopping worker half-closes its stream");
});

test("a reconnecting worker declares the jobs still running as in_flight, and their slots come back once", async (t) => {
  const gw = new FakeGateway();
  await gw.start();
  t.after(() => gw.forceStop());
  const release = gate();
  const w = new Worker([gw.address], { workerId: "w-2", concurrency: 2, logger: silentLogger });
  let started = 0;
  w.register("t", async () => {
    started++;
    await release.promise;
  });
  const stop = new AbortController();
  const run = w.run({ signal: stop.signal, stopOn: [] });
  await waitFor("the open", () => gw.opens.length === 1);
  gw.assign({ id: "a" });
  await waitFor("the handler", () => started === 1);
  gw.breakStreams();
  await waitFor("the reconnect", () => gw.opens.length === 2);
  assert.equal(gw.opens[1]!.inFlight, 1, "the running job is declared on the new stream");
  release.open();
  await waitFor("the result", () => gw.results.length === 1);
  await waitFor("the slot credited", () => gw.credits.reduce((a, b) => a + b, 0) === 1);
  stop.abort();
  await run;
  assert.equal(gw.credits.reduce((a, b) => a + b, 0), 1, "the freed slot is credited exactly once");
});

test("heartbeats stop a canceled job and a lost lease with their reasons, and renew the rest", async (t) => {
  const gw = new FakeGateway(2_000, 100);
  await gw.start();
  t.after(() => gw.forceStop());
  gw.answer = (id) => (id === "gone" ? { leaseHeld: true, canceled: true } : id === "lost" ? { leaseHeld: false } : { leaseHeld: true });
  const reasons = new Map<string, unknown>();
  const release = gate();
  const w = new Worker([gw.address], { workerId: "w-3", concurrency: 3, logger: silentLogger });
  w.register("t", async (job: Job) => {
    if (job.id === "kept") {
      await release.promise;
      return;
    }
    await new Promise<void>((resolve) => job.signal.addEventListener("abort", () => resolve(), { once: true }));
    reasons.set(job.id, job.signal.reason);
    throw job.signal.reason;
  });
  const stop = new AbortController();
  const run = w.run({ signal: stop.signal, stopOn: [] });
  await waitFor("the open", () => gw.opens.length === 1);
  gw.assign({ id: "gone" }, { id: "lost" }, { id: "kept" });
  await waitFor("both stopped", () => reasons.size === 2);
  assert.ok(reasons.get("gone") instanceof JobCanceledError);
  assert.ok(reasons.get("lost") instanceof LeaseLostError);
  const beatsBefore = gw.heartbeats.length;
  await waitFor("more heartbeats for the kept job", () => gw.heartbeats.length >= beatsBefore + 2);
  const last = gw.heartbeats.at(-1)!;
  assert.deepEqual(last.jobs.map((j) => j.jobId), ["kept"], "given-up attempts are no longer heartbeated");
  release.open();
  stop.abort();
  await run;
});

test("a job's timeout fires its signal and fails the attempt saying so", async (t) => {
  const gw = new FakeGateway();
  await gw.start();
  t.after(() => gw.forceStop());
  const w = new Worker([gw.address], { workerId: "w-4", concurrency: 1, logger: silentLogger });
  w.register("t", (job: Job) => new Promise<void>((_, reject) => job.signal.addEventListener("abort", () => reject(job.signal.reason), { once: true })));
  const stop = new AbortController();
  const run = w.run({ signal: stop.signal, stopOn: [] });
  await waitFor("the open", () => gw.opens.length === 1);
  gw.assign({ id: "slow", timeoutMs: 1000 });
  await waitFor("the result", () => gw.results.length === 1);
  assert.equal(gw.results[0]!.outcome, Outcome.FAIL);
  assert.equal(gw.results[0]!.error, "timed out after 1s");
  stop.abort();
  await run;
});

test("every gateway refusing the worker before any welcome rejects run; an unreachable one does not", async (t) => {
  const a = new FakeGateway();
  const b = new FakeGateway();
  await a.start();
  await b.start();
  t.after(() => {
    a.forceStop();
    b.forceStop();
  });
  a.refuse = b.refuse = grpc.status.UNAUTHENTICATED;
  const w = new Worker([a.address, b.address], { workerId: "w-5", logger: silentLogger });
  w.register("t", () => {});
  await assert.rejects(w.run({ stopOn: [] }), (err: unknown) => err instanceof WorkerRefusedError && /every gateway refused the worker/.test((err as Error).message));
  assert.ok(a.opens.length >= 1 && b.opens.length >= 1, "both gateways were asked");

  const unreachable = new Worker(["127.0.0.1:1"], { workerId: "w-6", logger: silentLogger });
  unreachable.register("t", () => {});
  const stop = new AbortController();
  const run = unreachable.run({ signal: stop.signal, stopOn: [] });
  await new Promise((resolve) => setImmediate(resolve));
  stop.abort();
  await run; // an outage is not a refusal: run keeps reconnecting until stopped, then returns
});

test("middleware wraps every handler, the first outermost, and can change the outcome", async (t) => {
  const gw = new FakeGateway();
  await gw.start();
  t.after(() => gw.forceStop());
  const order: string[] = [];
  const w = new Worker([gw.address], { workerId: "w-mw", concurrency: 1, logger: silentLogger });
  w.use(
    (next) => async (job) => {
      order.push("outer-before");
      try {
        await next(job);
      } catch (err) {
        throw permanent(err); // this middleware's policy: nothing is retried
      } finally {
        order.push("outer-after");
      }
    },
    (next) => async (job) => {
      order.push("inner");
      return next(job);
    },
  );
  w.register("t", () => {
    order.push("handler");
    throw new Error("boom");
  });
  assert.throws(() => w.use(42 as never), /not a function/);
  const stop = new AbortController();
  const run = w.run({ signal: stop.signal, stopOn: [] });
  await waitFor("the open", () => gw.opens.length === 1);
  gw.assign({ id: "a" });
  await waitFor("the result", () => gw.results.length === 1);
  assert.deepEqual(order, ["outer-before", "inner", "handler", "outer-after"]);
  assert.equal(gw.results[0]!.outcome, Outcome.FAIL_PERMANENT);
  assert.equal(gw.results[0]!.error, "boom");
  assert.throws(() => w.use((next) => next), /after run started/);
  stop.abort();
  await run;
});
