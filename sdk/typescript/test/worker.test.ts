import { test } from "node:test";
import assert from "node:assert/strict";
import { Worker, permanent, retryAfter, JobTimeoutError } from "../src/index.js";
import { resultOf } from "../src/worker.js";
import { Outcome } from "../src/gen/pulse/v1/dispatch_pb.js";
import { durationToMs } from "../src/time.js";
import { formatDuration } from "../src/errors.js";

const job = { id: "j", attempt: 2 };

test("results carry the outcome the handler meant", () => {
  assert.equal(resultOf(job, { ok: true }).outcome, Outcome.COMPLETE);
  const fail = resultOf(job, { ok: false, error: new Error("flaky") });
  assert.equal(fail.outcome, Outcome.FAIL);
  assert.equal(fail.error, "flaky");
  assert.equal(fail.retryAfter, undefined);
  const perm = resultOf(job, { ok: false, error: permanent(new Error("hopeless")) });
  assert.equal(perm.outcome, Outcome.FAIL_PERMANENT);
  assert.equal(perm.error, "hopeless");
  const later = resultOf(job, { ok: false, error: retryAfter(3_600_000, new Error("later")) });
  assert.equal(later.outcome, Outcome.FAIL);
  assert.equal(durationToMs(later.retryAfter), 3_600_000);
  assert.equal(later.error, "later");
  const both = resultOf(job, { ok: false, error: permanent(retryAfter(5, new Error("x"))) });
  assert.equal(both.outcome, Outcome.FAIL_PERMANENT, "permanent wins over retry-after");
  const wrapped = resultOf(job, { ok: false, error: new Error("outer", { cause: permanent(new Error("inner")) }) });
  assert.equal(wrapped.outcome, Outcome.FAIL_PERMANENT, "a permanent cause counts");
  assert.equal(resultOf(job, { ok: false, error: "a string" }).error, "a string");
  assert.equal(resultOf(job, { ok: false, error: undefined }).error, "undefined");
  assert.equal(resultOf(job, { ok: false, error: new Error("nul:\u0000:\uD800") }).error, "nul:\uFFFD:\uFFFD");
  const hostile = { toString() { throw new Error("no"); } };
  assert.equal(resultOf(job, { ok: false, error: hostile }).error, "[object Object]", "a thrown value whose toString throws still reports");
  assert.equal(resultOf(job, { ok: false, error: Symbol("s") }).error, "Symbol(s)");
  const odd = new Error("x");
  (odd as unknown as { message: unknown }).message = 42;
  assert.equal(resultOf(job, { ok: false, error: odd }).error, "42");
});

test("retry-after is clamped to 1 ms..366 days", () => {
  assert.equal(retryAfter(0, new Error("x")).delayMs, 1);
  assert.equal(retryAfter(1e15, new Error("x")).delayMs, 366 * 24 * 3_600_000);
  assert.equal(retryAfter(1.0000001).delayMs, 1.001, "rounded up to a microsecond");
  assert.equal(retryAfter(250).message, "retry requested after 250ms");
});

test("a timeout's error says how long, and what the handler returned", () => {
  assert.equal(new JobTimeoutError(1000).message, "timed out after 1s");
  assert.equal(new JobTimeoutError(1500, new Error("stuck")).message, "timed out after 1.5s: stuck");
  assert.equal(new JobTimeoutError(1000, new JobTimeoutError(1000)).message, "timed out after 1s");
  assert.equal(formatDuration(90_000), "1m30s");
  assert.equal(formatDuration(3_600_000), "1h0m0s");
});

test("worker options are checked at construction", () => {
  assert.throws(() => new Worker([]), /at least one dispatch-gateway target/);
  assert.throws(() => new Worker([""]), /target 0 is empty/);
  assert.throws(() => new Worker(["127.0.0.1:1"], { concurrency: 0 }), /concurrency must be a positive integer/);
  assert.throws(() => new Worker(["127.0.0.1:1"], { workerId: "x".repeat(201) }), /201 bytes; the limit is 200/);
  assert.throws(() => new Worker(["gw.example.com:1"], { user: "u", password: "p" }), /refusing to send credentials over plaintext/);
  const w = new Worker(["127.0.0.1:1"], { workerId: "w1" });
  assert.equal(w.id, "w1");
  w.register("t", () => {});
  assert.throws(() => w.register("t", () => {}), /registered twice/);
  assert.throws(() => w.register("bad topic", () => {}), /must match/);
  assert.throws(() => w.register("u", () => {}, { timeoutMs: 10 }), /timeoutMs 10 out of range/);
  assert.match(new Worker(["127.0.0.1:1"]).id, /^.+-\d+-[0-9a-f]{6}$/);
});

test("run refuses a worker without handlers", async () => {
  await assert.rejects(new Worker(["127.0.0.1:1"]).run({ stopOn: [] }), /no handlers registered/);
});
