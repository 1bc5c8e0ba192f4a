import { test } from "node:test";
import assert from "node:assert/strict";
import { buildJobSpec, Client, PlaintextCredentialsError } from "../src/index.js";
import { loopbackTarget } from "../src/conn.js";
import { durationToMs, timestampToDate } from "../src/time.js";
import { ReplaceMode } from "../src/gen/pulse/v1/job_pb.js";

test("every job option reaches the wire form", () => {
  const runAt = new Date("2030-01-02T03:04:05.678Z");
  const spec = buildJobSpec("email.send", { to: "a@b.c" }, {
    priority: 7, maxAttempts: 3, runAt, idempotencyKey: "k1", timeoutMs: 1500, uniqueForMs: 60_000,
    exponentialBackoff: { baseMs: 10, maxMs: 5000 },
  });
  assert.equal(spec.topic, "email.send");
  assert.equal(new TextDecoder().decode(spec.args), '{"to":"a@b.c"}');
  assert.equal(spec.priority, 7);
  assert.equal(spec.hasPriority, true);
  assert.equal(spec.maxAttempts, 3);
  assert.equal(timestampToDate(spec.runAt)?.toISOString(), runAt.toISOString());
  assert.equal(spec.idempotencyKey, "k1");
  assert.equal(durationToMs(spec.timeout), 1500);
  assert.equal(durationToMs(spec.uniqueFor), 60_000);
  assert.equal(durationToMs(spec.retry?.base), 10);
  assert.equal(durationToMs(spec.retry?.max), 5000);
  const fixed = buildJobSpec("t", undefined, { fixedBackoffMs: 250, priority: 0 });
  assert.equal(durationToMs(fixed.retry?.fixed), 250);
  assert.equal(fixed.hasPriority, true, "priority 0 is set, not the default");
  assert.equal(new TextDecoder().decode(fixed.args), "{}");
  const raw = buildJobSpec("t", new TextEncoder().encode('{"n":12345678901234567890}'));
  assert.equal(new TextDecoder().decode(raw.args), '{"n":12345678901234567890}', "bytes are sent as they are");
  const delayed = buildJobSpec("t", {}, { delayMs: 60_000 });
  assert.ok(timestampToDate(delayed.runAt)!.getTime() > Date.now() + 50_000);
});

test("bad options are refused naming the option", () => {
  const cases: [string, () => unknown, RegExp][] = [
    ["empty topic", () => buildJobSpec("", {}), /topic is required/],
    ["bad topic", () => buildJobSpec("bad topic", {}), /topic "bad topic" must match/],
    ["priority", () => buildJobSpec("t", {}, { priority: 11 }), /priority 11 out of range 0..10/],
    ["fractional priority", () => buildJobSpec("t", {}, { priority: 1.5 }), /priority 1.5/],
    ["maxAttempts", () => buildJobSpec("t", {}, { maxAttempts: 0 }), /maxAttempts 0 out of range 1..100/],
    ["timeout", () => buildJobSpec("t", {}, { timeoutMs: 500 }), /timeoutMs 500 out of range/],
    ["uniqueFor", () => buildJobSpec("t", {}, { uniqueForMs: NaN }), /uniqueForMs NaN/],
    ["sub-microsecond", () => buildJobSpec("t", {}, { fixedBackoffMs: 1.0000001 }), /finer than a microsecond/],
    ["backoff max below base", () => buildJobSpec("t", {}, { exponentialBackoff: { baseMs: 100, maxMs: 10 } }), /below its baseMs/],
    ["both backoffs", () => buildJobSpec("t", {}, { exponentialBackoff: { baseMs: 1 }, fixedBackoffMs: 1 }), /not both/],
    ["runAt and delay", () => buildJobSpec("t", {}, { runAt: new Date(), delayMs: 1 }), /not both/],
    ["invalid date", () => buildJobSpec("t", {}, { runAt: new Date("nope") }), /runAt is not a valid Date/],
    ["NUL key", () => buildJobSpec("t", {}, { idempotencyKey: "a\u0000" }), /NUL/],
    ["lone surrogate key", () => buildJobSpec("t", {}, { idempotencyKey: "a\uD800" }), /not valid UTF-8/],
    ["long key", () => buildJobSpec("t", {}, { idempotencyKey: "é".repeat(128) }), /256 bytes, more than 255/],
    ["NUL replace key", () => buildJobSpec("t", {}, { replaceKey: "a\u0000" }), /replaceKey contains a NUL/],
    ["long replace key", () => buildJobSpec("t", {}, { replaceKey: "k".repeat(256) }), /replaceKey is 256 bytes/],
    ["replace mode without key", () => buildJobSpec("t", {}, { replaceMode: "keep_first" }), /needs a replaceKey/],
    ["unknown replace mode", () => buildJobSpec("t", {}, { replaceKey: "k", replaceMode: "x" as "replace" }), /not replace/],
    ["NUL rate key", () => buildJobSpec("t", {}, { rateKey: "a\u0000" }), /rateKey contains a NUL/],
    ["long rate key", () => buildJobSpec("t", {}, { rateKey: "k".repeat(256) }), /rateKey is 256 bytes/],
    ["empty rate key", () => buildJobSpec("t", {}, { rateKey: "" }), /rateKey is empty/],
    ["NUL concurrency key", () => buildJobSpec("t", {}, { concurrencyKey: "a\u0000" }), /concurrencyKey contains a NUL/],
    ["long concurrency key", () => buildJobSpec("t", {}, { concurrencyKey: "k".repeat(256) }), /concurrencyKey is 256 bytes/],
    ["empty concurrency key", () => buildJobSpec("t", {}, { concurrencyKey: "" }), /concurrencyKey is empty/],
    ["NUL sequence key", () => buildJobSpec("t", {}, { sequenceKey: "a\u0000" }), /sequenceKey contains a NUL/],
    ["long sequence key", () => buildJobSpec("t", {}, { sequenceKey: "k".repeat(256) }), /sequenceKey is 256 bytes/],
    ["empty sequence key", () => buildJobSpec("t", {}, { sequenceKey: "" }), /sequenceKey is empty/],
    ["args that are not JSON", () => buildJobSpec("t", () => 1), /does not encode to JSON/],
    ["cyclic args", () => { const a: Record<string, unknown> = {}; a.a = a; return buildJobSpec("t", a); }, /encode args for t/],
  ];
  for (const [name, f, want] of cases) {
    assert.throws(f, want, name);
  }
});

test("replaceKey and replaceMode reach the spec", () => {
  const spec = buildJobSpec("t", {}, { replaceKey: "doc-7", replaceMode: "keep_earlier_run_at" });
  assert.equal(spec.replaceKey, "doc-7");
  assert.equal(spec.replaceMode, ReplaceMode.KEEP_EARLIER_RUN_AT);
  assert.equal(buildJobSpec("t", {}, { replaceKey: "doc-7" }).replaceMode, ReplaceMode.REPLACE);
});

test("concurrencyKey and sequenceKey reach the spec", () => {
  const spec = buildJobSpec("t", {}, { concurrencyKey: "tenant:acme", sequenceKey: "order-1" });
  assert.equal(spec.concurrencyKey, "tenant:acme");
  assert.equal(spec.sequenceKey, "order-1");
});

test("rateKey reaches the spec", () => {
  assert.equal(buildJobSpec("t", {}, { rateKey: "tenant:acme" }).rateKey, "tenant:acme");
});

test("credentials are refused over plaintext beyond loopback", () => {
  assert.throws(() => new Client("pulse.example.com:9090", { user: "u", password: "p" }), PlaintextCredentialsError);
  assert.throws(() => new Client("10.0.0.1:9090", { metadata: { authorization: "Bearer t" } }), PlaintextCredentialsError);
  new Client("127.0.0.1:9090", { user: "u", password: "p" }).close();
  new Client("localhost:9090", { user: "u", password: "p" }).close();
  new Client("pulse.example.com:9090", { user: "u", password: "p", allowPlaintextCredentials: true }).close();
  new Client("pulse.example.com:9090").close();
});

test("loopback targets", () => {
  for (const t of ["127.0.0.1:1", "localhost:1", "[::1]:1", "dns:///localhost:1", "ipv4:127.0.0.1:1,127.0.0.2:2", "unix:/tmp/s", "127.0.0.1"]) {
    assert.equal(loopbackTarget(t), true, t);
  }
  for (const t of ["example.com:1", "10.0.0.1:1", "dns:///example.com:1", "ipv4:127.0.0.1:1,10.0.0.1:2", "localhost:http", "[::2]:1", "localhost.example.com:1"]) {
    assert.equal(loopbackTarget(t), false, t);
  }
});
