import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker, type Logger } from "../src/index.js";
import { Outcome } from "../src/gen/pulse/v1/dispatch_pb.js";
import { FakeGateway, waitFor } from "./fakegateway.js";

// The certificates live beside the sources (test/testdata), not in dist.
const testdata = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "test", "testdata");
const serverTLS = { cert: readFileSync(join(testdata, "server.pem")), key: readFileSync(join(testdata, "server.key")) };

/** A logger that keeps the messages it was given. */
function recording(): Logger & { messages: string[] } {
  const messages: string[] = [];
  const keep = (m: string) => void messages.push(m);
  return { messages, debug: keep, info: keep, warn: keep, error: keep };
}

test("over TLS the worker verifies the gateway by the CA it was given and sends its basic credentials", async (t) => {
  const gw = new FakeGateway(30_000, 10_000, serverTLS);
  await gw.start();
  t.after(() => gw.forceStop());
  const w = new Worker([gw.address], {
    workerId: "w-tls", concurrency: 1, user: "worker", password: "s3cret", tls: { caFile: join(testdata, "ca.pem") }, logger: recording(),
  });
  w.register("t", () => {});
  const stop = new AbortController();
  const run = w.run({ signal: stop.signal, stopOn: [] });
  await waitFor("the open", () => gw.opens.length === 1);
  assert.equal(gw.authorizations[0], "Basic " + Buffer.from("worker:s3cret").toString("base64"));
  gw.assign({ id: "a" });
  await waitFor("the result", () => gw.results.length === 1);
  assert.equal(gw.results[0]!.outcome, Outcome.COMPLETE);
  stop.abort();
  await run;
});

test("a gateway whose certificate another CA signed is never streamed from", async (t) => {
  const gw = new FakeGateway(30_000, 10_000, serverTLS);
  await gw.start();
  t.after(() => gw.forceStop());
  const log = recording();
  const w = new Worker([gw.address], { workerId: "w-bad-ca", tls: { caFile: join(testdata, "other-ca.pem") }, logger: log });
  w.register("t", () => {});
  const stop = new AbortController();
  const run = w.run({ signal: stop.signal, stopOn: [] });
  await waitFor("two failed connections", () => log.messages.filter((m) => m === "job stream lost, reconnecting").length >= 2);
  assert.equal(gw.opens.length, 0, "no stream opened past a certificate the worker does not trust");
  stop.abort();
  await run;
});

test("TLS files that cannot be read fail at construction, naming the file", () => {
  assert.throws(() => new Worker(["127.0.0.1:1"], { tls: { caFile: "/nonexistent/ca.pem" } }), /read TLS CA file "\/nonexistent\/ca.pem"/);
  assert.throws(() => new Worker(["127.0.0.1:1"], { tls: { certFile: join(testdata, "server.pem") } }), /certificate and key go together/);
});
