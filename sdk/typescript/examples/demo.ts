/**
 * The TypeScript demo `make dev` runs beside the Go demo: it enqueues jobs
 * on its own topic with the producer and runs them with a worker, so the
 * dashboard shows a Node worker at work.
 *
 *   PULSE_CONTROL_API_ADDR   control-api gRPC address (required)
 *   PULSE_GATEWAY_ADDRS      comma-separated gateway addresses (required)
 *   PULSE_DEMO_TOPIC         topic (default ts.greet)
 *   PULSE_DEMO_RATE          jobs per second (default 5)
 *   PULSE_USER, PULSE_PASSWORD                    the worker's credentials
 *   PULSE_PRODUCER_USER, PULSE_PRODUCER_PASSWORD  the producer's credentials
 */
// The stop signals are caught before the SDK (and gRPC) load, which takes
// a while: a SIGTERM that arrives meanwhile drains the demo instead of
// killing it. The demo says "working" once it is caught.
const stop = new AbortController();
for (const s of ["SIGTERM", "SIGINT"] as const) {
  process.on(s, () => stop.abort());
}
const { Client, Worker, retryAfter } = await import("../src/index.js");

function required(name: string): string {
  const v = process.env[name];
  if (!v) {
    process.stderr.write(`demo: ${name} is required\n`);
    process.exit(2);
  }
  return v;
}

const control = required("PULSE_CONTROL_API_ADDR");
const gateways = required("PULSE_GATEWAY_ADDRS").split(",").filter((s) => s !== "");
const topic = process.env.PULSE_DEMO_TOPIC || "ts.greet";
const rate = Number(process.env.PULSE_DEMO_RATE || "5");
if (!(rate > 0)) {
  process.stderr.write(`demo: PULSE_DEMO_RATE must be a positive number of jobs per second, got ${JSON.stringify(process.env.PULSE_DEMO_RATE)}\n`);
  process.exit(2);
}
const producerAuth = process.env.PULSE_PRODUCER_USER ? { user: process.env.PULSE_PRODUCER_USER, password: process.env.PULSE_PRODUCER_PASSWORD } : {};
const workerAuth = process.env.PULSE_USER ? { user: process.env.PULSE_USER, password: process.env.PULSE_PASSWORD } : {};

const client = new Client(control, producerAuth);
const worker = new Worker(gateways, { ...workerAuth, concurrency: 4 });
worker.register(topic, async (job) => {
  const { name } = job.args as { name: string };
  await new Promise((resolve) => setTimeout(resolve, 20 + Math.random() * 80));
  if (Math.random() < 0.05) {
    throw retryAfter(500, new Error(`greeting ${name} bounced`));
  }
});

const names = ["ada", "grace", "linus", "margaret", "ken"];
const producing = (async () => {
  while (!stop.signal.aborted) {
    try {
      await client.enqueue(topic, { name: names[Math.floor(Math.random() * names.length)] }, { maxAttempts: 3 });
    } catch (err) {
      process.stderr.write(`demo: enqueue: ${(err as Error).message}\n`);
    }
    await new Promise((resolve) => setTimeout(resolve, 1000 / rate));
  }
})();
process.stderr.write(`${JSON.stringify({ msg: "working", topic, gateways, sdk: "typescript" })}\n`);
await worker.run({ signal: stop.signal, stopOn: [] });
await producing;
client.close();
