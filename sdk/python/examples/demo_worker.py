#!/usr/bin/env python3
"""The Python SDK's demo: a producer and a worker on the Python topic, beside
the Go demo's, so `make dev` and `docker compose up` show jobs of three
languages on the dashboard. The worker pretends to render a thumbnail for
5–200 ms (with a safe point between its two steps, and its progress and stage reported), fails about 10% of
attempts (retried) and 1% permanently (dead-lettered); the producer
enqueues a small batch every second. Progress is logged every 5 s.

Environment:
  PULSE_GATEWAY_ADDRS        comma-separated dispatch-gateway addresses (default localhost:50052)
  PULSE_CONTROL_API_ADDR     control-api gRPC address for the producer (default localhost:50051; empty: no producer)
  PULSE_DEMO_TOPIC           the topic (default py.thumbnail.render)
  PULSE_DEMO_CONCURRENCY     handlers at once (default 4)
  PULSE_DEMO_RATE            jobs enqueued per second (default 5; 0: no producer)
  PULSE_USER                 the worker's user (unset: no credentials)
  PULSE_PASSWORD             the worker's password
  PULSE_PRODUCER_USER        the producer's user (unset: no credentials)
  PULSE_PRODUCER_PASSWORD    the producer's password
  PULSE_ALLOW_PLAINTEXT_CREDENTIALS  true: send them over plaintext beyond loopback (a trusted network only)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import sys
import time

# The stop signals are caught before the SDK (and gRPC) load, which takes
# a while: a SIGTERM that arrives before the worker's own handlers are in
# place stops the worker (a stop() before run() is honoured) instead of
# killing the demo. The demo says "working" once it is caught.
_worker: list = []
_early_stop: list = []


def _stop_early(sig: int, _frame) -> None:
    if _worker:
        _worker[0].stop()
    else:
        _early_stop.append(sig)


signal.signal(signal.SIGTERM, _stop_early)
signal.signal(signal.SIGINT, _stop_early)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pulsequeue as pulse  # noqa: E402

PERMANENT_RATE = 0.01
TRANSIENT_RATE = 0.10
REPORT_EVERY = 5.0


class JSONFormatter(logging.Formatter):
    def format(self, r: logging.LogRecord) -> str:
        out = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r.created)), "level": r.levelname,
               "msg": r.getMessage(), "logger": r.name}
        out.update(getattr(r, "fields", {}))
        return json.dumps(out, separators=(",", ":"))


log = logging.getLogger("demo-worker-python")


def info(msg: str, **fields) -> None:
    log.info(msg, extra={"fields": fields})


def env_int(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    if not v:
        return default
    if not v.isdigit():
        print(f"{name}: want a non-negative integer, got {v!r}", file=sys.stderr)
        sys.exit(2)
    return int(v)


def creds(user_var: str, pass_var: str) -> dict:
    user = os.environ.get(user_var)
    if not user:
        return {}
    out = {"user": user, "password": os.environ.get(pass_var, "")}
    if os.environ.get("PULSE_ALLOW_PLAINTEXT_CREDENTIALS", "").lower() == "true":
        out["allow_plaintext_credentials"] = True
    return out


counts = {"done": 0, "failed": 0, "permanent": 0, "sent": 0}


async def render(job: pulse.Job) -> None:
    args = job.json()
    await asyncio.sleep(random.uniform(0.005, 0.1))
    await job.safe_point()  # an operator's quiesce holds here
    await job.set_progress(50)
    await job.set_metadata({"stage": "encoded"})
    await asyncio.sleep(random.uniform(0.0, 0.1))
    r = random.random()
    if r < PERMANENT_RATE:
        counts["permanent"] += 1
        raise pulse.Permanent(f"demo: image {args.get('image')} is not an image")
    if r < PERMANENT_RATE + TRANSIENT_RATE:
        counts["failed"] += 1
        raise RuntimeError("demo: storage timed out")
    counts["done"] += 1


async def produce(addr: str, topic: str, rate: int, stop: asyncio.Event) -> None:
    async with pulse.Client(addr, **creds("PULSE_PRODUCER_USER", "PULSE_PRODUCER_PASSWORD")) as client:
        n = 0
        while not stop.is_set():
            jobs = []
            for _ in range(rate):
                n += 1
                jobs.append(pulse.JobRequest(topic, {"image": f"img-{n}.png", "width": 128},
                                             priority=random.randint(0, 10), max_attempts=5))
            try:
                await client.enqueue_many(jobs)
                counts["sent"] += len(jobs)
            except Exception as e:  # control-api restarting: try again next second
                log.warning("enqueue failed: %s", e)
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass


async def progress(stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), REPORT_EVERY)
        except asyncio.TimeoutError:
            info("progress", **counts)


async def main() -> None:
    gateways = [a.strip() for a in os.environ.get("PULSE_GATEWAY_ADDRS", "localhost:50052").split(",") if a.strip()]
    control = os.environ.get("PULSE_CONTROL_API_ADDR", "localhost:50051")
    topic = os.environ.get("PULSE_DEMO_TOPIC", "py.thumbnail.render")
    concurrency = env_int("PULSE_DEMO_CONCURRENCY", 4) or 1
    rate = env_int("PULSE_DEMO_RATE", 5)
    w = pulse.Worker(gateways, concurrency=concurrency, **creds("PULSE_USER", "PULSE_PASSWORD"))
    w.register(topic, render, timeout=30)
    _worker.append(w)
    if _early_stop:
        w.stop()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(progress(stop))]
    if control and rate > 0:
        tasks.append(asyncio.create_task(produce(control, topic, rate, stop)))
    info("working", gateways=gateways, topic=topic, concurrency=concurrency, rate=rate, sdk="python",
         version=pulse.__version__)
    try:
        await w.run()  # until SIGTERM / SIGINT, then drains
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    info("stopped", **counts)


if __name__ == "__main__":
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(JSONFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[h])
    asyncio.run(main())
