#!/usr/bin/env python3
"""The Python SDK's conformance driver: a pulse worker whose handler does
what each job's args say and prints what happened as JSON lines on stdout,
so the conformance suite (e2e/conformance) holds this SDK to the same
contracts as every other. The contract — environment, job ops, event lines
— is docs/sdk-conformance.md."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pulsequeue as pulse  # noqa: E402

ENV_GATEWAYS = "PULSE_GATEWAY_ADDRS"
ENV_TOPICS = "PULSE_TOPICS"
ENV_WORKER_ID = "PULSE_WORKER_ID"
ENV_CONCURRENCY = "PULSE_CONCURRENCY"
ENV_SHUTDOWN_TIMEOUT = "PULSE_SHUTDOWN_TIMEOUT_MS"
ENV_USER = "PULSE_USER"
ENV_PASSWORD = "PULSE_PASSWORD"

CONCURRENCY_DEFAULT = 1
SHUTDOWN_TIMEOUT_DEFAULT_MS = 10_000
# Keeps a huge error from flooding the event stream; the suite reads stored
# errors from the server.
MAX_EVENT_ERROR = 200


class ConfigError(Exception):
    pass


def split_list(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def load_config(env) -> dict:
    c = {
        "gateways": split_list(env.get(ENV_GATEWAYS, "")),
        "topics": split_list(env.get(ENV_TOPICS, "")),
        "worker_id": env.get(ENV_WORKER_ID, ""),
        "concurrency": CONCURRENCY_DEFAULT,
        "shutdown_timeout": SHUTDOWN_TIMEOUT_DEFAULT_MS / 1000,
        "user": env.get(ENV_USER, ""),
        "password": env.get(ENV_PASSWORD, ""),
    }
    if not c["gateways"]:
        raise ConfigError(f"{ENV_GATEWAYS} is required (comma-separated gateway addresses)")
    if not c["topics"]:
        raise ConfigError(f"{ENV_TOPICS} is required (comma-separated topics)")
    if not c["worker_id"]:
        raise ConfigError(f"{ENV_WORKER_ID} is required")
    v = env.get(ENV_CONCURRENCY, "")
    if v:
        if not v.isdigit() or int(v) < 1:
            raise ConfigError(f"{ENV_CONCURRENCY} must be a positive integer, got {v!r}")
        c["concurrency"] = int(v)
    v = env.get(ENV_SHUTDOWN_TIMEOUT, "")
    if v:
        if not v.isdigit():
            raise ConfigError(f"{ENV_SHUTDOWN_TIMEOUT} must be a non-negative integer of milliseconds, got {v!r}")
        c["shutdown_timeout"] = int(v) / 1000
    return c


def emit(event: str, **fields) -> None:
    """One whole line per event on stdout; fields left empty are omitted,
    like the Go driver's omitempty."""
    if len(fields.get("error", "")) > MAX_EVENT_ERROR:
        fields["error"] = fields["error"][:MAX_EVENT_ERROR]
    line = {"event": event}
    line.update({k: v for k, v in fields.items() if v not in ("", 0, None)})
    sys.stdout.write(json.dumps(line, ensure_ascii=True) + "\n")
    sys.stdout.flush()


REASONS = {
    pulse.JobCanceled: "canceled",
    pulse.LeaseLost: "lease_lost",
    pulse.JobTimedOut: "timeout",
    pulse.WorkerShutdown: "shutdown",
}


class Stopped(Exception):
    """The attempt saw its stop signal; carries the cause to fail with."""


def aborted(job: pulse.Job) -> BaseException:
    cause = job.stop_cause
    reason = REASONS.get(type(cause), "unknown")
    detail = str(cause) if cause is not None else "cancelled"
    emit("aborted", job=job.id, attempt=job.attempt, reason=reason, detail=detail)
    return cause if cause is not None else RuntimeError(detail)


async def sleep(job: pulse.Job, ms: int) -> None:
    try:
        await asyncio.sleep(ms / 1000)
    except asyncio.CancelledError:
        raise Stopped() from None


async def wait_for_stop(job: pulse.Job) -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        pass


async def do(job: pulse.Job) -> None:
    try:
        a = json.loads(job.args)
        if not isinstance(a, dict):
            raise ValueError("args are not a JSON object")
    except ValueError as e:
        raise pulse.Permanent(f"bad args: {e}") from None
    op = a.get("op")
    message = a.get("message") or "failed as asked"
    ms = int(a.get("ms") or 0)
    if op == "complete":
        return
    if op == "sleep":
        try:
            await sleep(job, ms)
        except Stopped:
            raise aborted(job) from None
        return
    if op == "fail":
        until = int(a.get("until_attempt") or 0)
        if until > 0 and job.attempt >= until:
            return
        raise RuntimeError(message)
    if op == "fail_permanent":
        raise pulse.Permanent(message)
    if op == "retry_after":
        if job.attempt > 1:
            return
        raise pulse.RetryAfter(ms / 1000, RuntimeError(message))
    if op == "wait_cancel":
        await wait_for_stop(job)
        raise aborted(job)
    if op == "checkpoint":
        for i in range(1, int(a.get("steps") or 0) + 1):
            try:
                await sleep(job, ms)
                await job.safe_point()
            except (Stopped, asyncio.CancelledError, pulse.StopCause):
                raise aborted(job) from None
            emit("checkpoint", job=job.id, attempt=job.attempt, n=i)
        return
    if op == "hang_past_lease":
        if job.attempt > 1:
            raise pulse.Permanent("second attempt")
        await wait_for_stop(job)
        aborted(job)
        return  # a success the gateway must refuse: the lease is gone
    if op == "huge_error":
        raise pulse.Permanent("x" * int(a.get("bytes") or 0))
    if op == "bad_utf8_error":
        raise pulse.Permanent("bad-utf8:\udcff\udcfe\udcc3:end")
    if op == "nul_error":
        raise pulse.Permanent("nul:\x00:end")
    raise pulse.Permanent(f"unknown op {op!r}")


async def handle(job: pulse.Job) -> None:
    emit("started", job=job.id, attempt=job.attempt, topic=job.topic)
    try:
        await do(job)
    except BaseException as e:
        if isinstance(e, pulse.Permanent):
            result = "fail_permanent"
        elif isinstance(e, pulse.RetryAfter):
            result = "retry_after"
        else:
            result = "fail"
        text = str(e) or type(e).__name__
        emit("finished", job=job.id, attempt=job.attempt, result=result, error=text.encode("utf-8", "replace").decode())
        raise
    emit("finished", job=job.id, attempt=job.attempt, result="complete")


async def run(cfg: dict) -> int:
    conn = {}
    if cfg["user"]:
        conn = {"user": cfg["user"], "password": cfg["password"]}
    w = pulse.Worker(
        cfg["gateways"],
        worker_id=cfg["worker_id"],
        concurrency=cfg["concurrency"],
        shutdown_timeout=cfg["shutdown_timeout"],
        logger=logging.getLogger("pulsequeue.driver"),
        **conn,
    )
    for t in cfg["topics"]:
        w.register(t, handle)
    emit("ready", sdk="python", worker_id=cfg["worker_id"])
    code = 0
    try:
        await w.run()
    except Exception as e:
        logging.getLogger("pulsequeue.driver").error("driver failed: %s", e)
        code = 1
    emit("stopped")
    return code


def main() -> int:
    try:
        cfg = load_config(os.environ)
    except ConfigError as e:
        print(f"pydriver: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return asyncio.run(run(cfg))


if __name__ == "__main__":
    sys.exit(main())
