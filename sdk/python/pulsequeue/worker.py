"""The worker: pulls jobs from dispatch-gateway replicas over StreamJobs and
runs them with registered handlers, holding the protocol exactly as the Go
SDK does (pkg/pulse: worker.go, stream_loop.go, slot_ledger.go,
executor.go, heartbeater.go, reporter.go, stale_lease.go, checkpoint.go,
dispatch_control.go). Everything runs on one asyncio event loop, so the
shared state needs no locks: each piece below is the Go file of the same
name, minus its mutex."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
import os
import random
import secrets
import signal
import socket
import time
import traceback
from typing import Any, Awaitable, Callable, Sequence

import grpc

from . import _durations as d
from ._conn import conn_options
from ._stubs import DispatchStub
from .client import check_topic
from .errors import (
    ConfigError,
    JobCanceled,
    JobTimedOut,
    LeaseLost,
    StopCause,
    WorkerRefused,
    WorkerShutdown,
    Permanent,
    permanent_in,
    retry_after_in,
    snooze_in,
)
from .job import Job, encode_result
from .pb.pulse.v1 import dispatch_control_pb2, dispatch_pb2

# Defaults, as in pkg/pulse/options.go.
DEFAULT_CONCURRENCY = 10
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
DEFAULT_MAX_REPORT_BATCH = 1000

# Lease terms assumed before a gateway welcomes the worker (lease_terms.go).
_DEFAULT_LEASE_TTL = 30.0
_DEFAULT_HEARTBEAT_INTERVAL = 10.0
# stream_loop.go
_RECONNECT_MIN, _RECONNECT_MAX = 0.1, 5.0
_HALF_CLOSE_GRACE = 3.0
# reporter.go
_REPORT_CONCURRENCY = 2
_REPORT_RETRY_MIN, _REPORT_RETRY_MAX = 0.05, 2.0
_RPC_TIMEOUT = 10.0
# worker.go / executor.go
_CANCEL_GRACE = 5.0
_FLUSH_TIMEOUT = 10.0
_TIMEOUT_GRACE = 1.0

_OK = grpc.StatusCode.OK.value[0]

Handler = Callable[[Job], Any]
Middleware = Callable[[Job, Callable[[Job], Awaitable[None]]], Awaitable[None]]

_REFUSED = {
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.ALREADY_EXISTS,
}


@dataclasses.dataclass
class _Registration:
    handler: Handler
    timeout_us: int


class Worker:
    """Receives jobs from the dispatch-gateway replicas at targets (one at a
    time, moving to the next when a stream breaks) and runs them with the
    registered handlers. Register every handler, then ``await run()``.

    Options: concurrency (handlers at once; the gateway never sends more
    jobs than free slots), worker_id (the jobs' locked_by; default
    hostname-pid-random), shutdown_timeout (seconds run() waits for running
    handlers when stopping before cancelling them with WorkerShutdown),
    max_report_batch, settle_behind (results that may wait to settle after
    their slots went back; default the concurrency, 0 keeps every lease
    within the concurrency), logger, handle_signals (run() stops on SIGTERM
    and SIGINT; default True), and the connection keywords of Client
    (user/password or token, tls, allow_plaintext_credentials, metadata,
    channel_options)."""

    def __init__(
        self,
        targets: Sequence[str],
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        worker_id: str | None = None,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
        max_report_batch: int = DEFAULT_MAX_REPORT_BATCH,
        settle_behind: int | None = None,
        logger: logging.Logger | None = None,
        handle_signals: bool = True,
        **conn,
    ) -> None:
        if isinstance(targets, str):
            raise ConfigError("pulse: targets must be a list of dispatch-gateway addresses, not a str")
        targets = list(targets)
        if not targets:
            raise ConfigError("pulse: at least one dispatch-gateway target is required")
        for i, t in enumerate(targets):
            if not t:
                raise ConfigError(f"pulse: dispatch-gateway target {i} is empty")
        _positive("concurrency", concurrency)
        _positive("max report batch", max_report_batch)
        if not isinstance(shutdown_timeout, (int, float)) or shutdown_timeout < 0:
            raise ConfigError(f"pulse: shutdown timeout must not be negative, got {shutdown_timeout!r}")
        if settle_behind is not None and (not isinstance(settle_behind, int) or settle_behind < 0):
            raise ConfigError(f"pulse: settle-behind must not be negative, got {settle_behind!r}")
        if worker_id is not None:
            if not worker_id:
                raise ConfigError("pulse: worker id must not be empty")
            if len(worker_id.encode()) > d.MAX_WORKER_ID_BYTES:
                raise ConfigError(
                    f"pulse: worker id is {len(worker_id.encode())} bytes; the limit is {d.MAX_WORKER_ID_BYTES}"
                )
        self._conn = conn_options(conn)
        self._conn.check(targets)
        self._targets = targets
        self.concurrency = concurrency
        self.id = worker_id or _default_worker_id()
        self._shutdown_timeout = float(shutdown_timeout)
        self._max_report_batch = max_report_batch
        self._settle_behind = concurrency if settle_behind is None else settle_behind
        self._log = logger or logging.getLogger("pulsequeue.worker")
        self._handle_signals = handle_signals
        self._handlers: dict[str, _Registration] = {}
        self._middleware: list[Middleware] = []
        self._started = False
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._hurry: asyncio.Event | None = None  # a second signal: stop handlers now
        # observer, when set, is called with (event, fields) at each step
        # of the protocol: for tests and the conformance driver.
        self.observer: Callable[[str, dict], None] | None = None

    def register(self, topic: str, handler: Handler, *, timeout: Any = None) -> None:
        """Runs handler for jobs of topic. handler(job) is a coroutine
        function (cancelled when the attempt must stop) or a plain function
        (run in a thread; it should watch job.stopping). Returning completes
        the job, what it returns (unless None) being the job's result;
        raising fails the attempt, retried with backoff while attempts
        remain (Permanent dead-letters now, RetryAfter picks the next
        attempt's time, Snooze puts the job back without spending an
        attempt). timeout (seconds or a timedelta, 1s..24h) is
        the topic's default for jobs enqueued without their own.
        Registration is start-up wiring: mistakes raise ConfigError."""
        check_topic(topic)
        if not callable(handler):
            raise ConfigError(f"pulse: register {topic!r} with a handler that is not callable")
        t = 0 if timeout is None else d.check_range("timeout", timeout, d.MIN_TIMEOUT, d.MAX_TIMEOUT)
        if self._started:
            raise ConfigError(f"pulse: register {topic!r} after run started")
        if topic in self._handlers:
            raise ConfigError(f"pulse: topic {topic!r} registered twice")
        self._handlers[topic] = _Registration(handler, t)

    def handler(self, topic: str, *, timeout: Any = None):
        """Decorator form of register."""

        def deco(fn):
            self.register(topic, fn, timeout=timeout)
            return fn

        return deco

    def use(self, *middleware: Middleware) -> None:
        """Wraps every handler, the first outermost: ``async def mw(job,
        next): ... await next(job) ...``. Middleware runs inside the
        attempt: what it raises is the attempt's result."""
        if self._started:
            raise ConfigError("pulse: use after run started")
        for i, m in enumerate(middleware):
            if not callable(m):
                raise ConfigError(f"pulse: use with a middleware that is not callable (argument {i})")
        self._middleware.extend(middleware)

    def stop(self) -> None:
        """Asks run() to shut down gracefully: take no more work, run what was
        claimed, report, return. Safe to call from the loop's thread
        before or during run()."""
        self._stop_requested = True
        if self._stop is not None:
            self._stop.set()

    async def run(self) -> None:
        """Receives and runs jobs until stop() (or SIGTERM/SIGINT), then
        shuts down: half-closes the stream (the gateway sends what it had
        claimed and ends it), waits up to shutdown_timeout for running
        handlers, cancels the rest with WorkerShutdown, reports every
        result it can and closes its connections. Raises WorkerRefused when
        every gateway refused the worker before any welcomed it; gateway
        outages are logged and reconnected through."""
        if self._started:
            raise ConfigError("pulse: worker already started")
        if not self._handlers:
            raise ConfigError("pulse: no handlers registered")
        self._started = True
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        installed = []
        if self._handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._signalled, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass
        rt = _Runtime(self, loop)
        try:
            await rt.run()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _signalled(self, sig: signal.Signals) -> None:
        """The first SIGTERM/SIGINT drains; a second one stops the running
        handlers at once (WorkerShutdown), as an impatient Ctrl-C means."""
        if self._stop is not None and self._stop.is_set():
            self._log.warning("second %s: stopping running handlers now", sig.name)
            if self._hurry is not None:
                self._hurry.set()
            return
        self._log.info("%s: draining (a second one stops running handlers now)", sig.name)
        self.stop()

    def _emit(self, event: str, **fields) -> None:
        if self.observer is not None:
            try:
                self.observer(event, fields)
            except Exception:  # an observer must not break the worker
                self._log.exception("worker observer failed")


class _Attempt:
    """One held attempt (running_jobs.go's runningJob)."""

    __slots__ = ("key", "job", "lease_until", "renewed_at", "given", "quiesced", "task", "stopped", "timeout_us")

    def __init__(self, key, job: Job, lease_until: float, now: float, quiesced: bool, loop) -> None:
        self.key = key
        self.job = job
        self.lease_until = lease_until  # wall clock, as the gateway reported it
        self.renewed_at = now  # monotonic, last confirmed
        self.given = False
        self.quiesced = quiesced
        self.task: asyncio.Task | None = None
        self.stopped = loop.create_future()  # resolved at the first stop
        self.timeout_us = 0

    def stop(self, cause: StopCause) -> None:
        if self.job.stop_cause is None:
            self.job.stop_cause = cause
            self.job.stopping.set()
        if not self.stopped.done():
            self.stopped.set_result(None)
        if self.task is not None and not self.task.done():
            self.task.cancel(str(cause))


class _Runtime:
    """One run() of a worker: the stream loop, executor, heartbeater and
    reporter, sharing the state below."""

    def __init__(self, w: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self.w = w
        self.loop = loop
        self.log = w._log
        self.md = w._conn.call_metadata()
        self.channels = [w._conn.channel(t) for t in w._targets]
        self.stubs = [DispatchStub(c) for c in self.channels]
        self.cur = 0
        self.rotated = False
        # lease terms (lease_terms.go)
        self.ttl = _DEFAULT_LEASE_TTL
        self.interval = _DEFAULT_HEARTBEAT_INTERVAL
        # slot ledger (slot_ledger.go)
        self.held = 0
        self.unsent = 0
        self.credit_wake = asyncio.Event()
        # running jobs (running_jobs.go, checkpoint.go)
        self.running: dict[tuple[str, int], _Attempt] = {}
        self.quiesce_changed = loop.create_future()
        self.quiesced_scopes: dict[str, bool] = {}
        # dispatch watch (dispatch_control.go)
        self.version = 0
        self.was_paused = False
        # heartbeater wake-ups: beat now, or re-read the interval
        self.hb_wake = asyncio.Event()
        self.beat_now = False
        # executor (executor.go)
        self.handlers = self._wrap_handlers()
        self.sem = asyncio.Semaphore(w.concurrency)
        self.behind = 0
        self.active = 0
        self.tasks: set[asyncio.Task] = set()
        self.threads = concurrent.futures.ThreadPoolExecutor(max_workers=w.concurrency, thread_name_prefix="pulse-handler")
        # reporter (reporter.go)
        self.queue: list[tuple[dispatch_pb2.JobResult, float, Callable[[], None]]] = []
        self.closing = False
        self.closed = False
        self.report_wake = asyncio.Event()

    # ---- gateway pool (gateway_pool.go)

    def rotate(self):
        if self.rotated:
            self.cur = (self.cur + 1) % len(self.stubs)
        self.rotated = True
        return self.w._targets[self.cur], self.stubs[self.cur]

    def current(self) -> DispatchStub:
        return self.stubs[self.cur]

    # ---- run (worker.go)

    async def run(self) -> None:
        w = self.w
        self.log.info(
            "worker %s started: topics %s, concurrency %d", w.id, ",".join(sorted(self.handlers)), w.concurrency
        )
        rep = asyncio.create_task(self.reporter())
        hb = asyncio.create_task(self.heartbeater())
        run_err: BaseException | None = None
        try:
            await self.stream_loop()
        except WorkerRefused as e:
            run_err = e
        finally:
            try:
                await self.wind_down()
            finally:
                hb.cancel()
                self.closing = True
                self.report_wake.set()
                try:
                    await asyncio.wait_for(asyncio.shield(rep), _FLUSH_TIMEOUT)
                except asyncio.TimeoutError:
                    rep.cancel()
                    self.drop_queued("worker stopped before results could be reported")
                await asyncio.gather(hb, rep, return_exceptions=True)
                self.threads.shutdown(wait=False)
                for c in self.channels:
                    await c.close()
        if run_err is not None:
            self.log.error("worker stopped: refused: %s", run_err)
            raise run_err
        self.log.info("worker stopped")
        w._emit("stopped")

    async def wind_down(self) -> None:
        if not self.tasks:
            return
        self.log.info("shutting down, waiting for %d running jobs", len(self.running))
        hurry = asyncio.ensure_future(self.w._hurry.wait())
        try:
            deadline = self.loop.time() + self.w._shutdown_timeout
            while self.tasks and not hurry.done():
                left = deadline - self.loop.time()
                if left <= 0:
                    break
                await asyncio.wait(set(self.tasks) | {hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hurry.cancel()
        if not self.tasks:
            return
        n = 0
        for a in list(self.running.values()):
            a.stop(WorkerShutdown())
            n += 1
        self.log.warning("shutdown timeout reached or a second signal came: cancelling %d running jobs", n)
        _, pending = await asyncio.wait(set(self.tasks), timeout=_CANCEL_GRACE)
        if pending:
            self.log.error("handlers ignored cancellation; their results will be dropped (%d)", len(self.running))

    # ---- stream loop (stream_loop.go)

    async def stream_loop(self) -> None:
        bo = _Backoff(_RECONNECT_MIN, _RECONNECT_MAX, jitter=True)
        ever_welcomed = False
        refusals = 0
        stop = self.w._stop
        while True:
            if stop.is_set():
                return
            target, stub = self.rotate()
            welcomed, err = await self.session(stub, target)
            if stop.is_set():
                return
            if welcomed:
                bo.reset()
                ever_welcomed = True
            is_refused = _code(err) in _REFUSED
            if not ever_welcomed:
                if not is_refused:
                    refusals = 0
                else:
                    refusals += 1
                    if refusals >= len(self.stubs):
                        raise WorkerRefused(f"pulse: every gateway refused the worker (last: {target}): {_describe(err)}")
            delay = bo.next()
            if is_refused:
                self.log.error("gateway %s refused the worker, reconnecting in %.2fs: %s", target, delay, _describe(err))
            else:
                self.log.warning("job stream to %s lost, reconnecting in %.2fs: %s", target, delay, _describe(err))
            self.w._emit("stream_lost", target=target, error=_describe(err))
            try:
                await asyncio.wait_for(stop.wait(), delay)
                return
            except asyncio.TimeoutError:
                pass

    async def session(self, stub: DispatchStub, target: str) -> tuple[bool, BaseException | None]:
        """One stream to its end: whether the gateway welcomed the worker,
        and what ended the stream."""
        stop = self.w._stop
        call = stub.StreamJobs(metadata=self.md)
        grace: asyncio.TimerHandle | None = None
        sender: asyncio.Task | None = None
        welcomed = False

        def start_grace(_=None) -> None:
            # The stream outlives the stop by up to _HALF_CLOSE_GRACE: the
            # gateway sends what it claimed and ends it; this bounds the
            # wait for one that does not (or never welcomes the worker).
            nonlocal grace
            if grace is None:
                grace = self.loop.call_later(_HALF_CLOSE_GRACE, call.cancel)

        stop_watch = asyncio.ensure_future(stop.wait())
        stop_watch.add_done_callback(lambda f: None if f.cancelled() else start_grace())
        try:
            in_flight = self.opened()
            await call.write(
                dispatch_pb2.StreamJobsRequest(
                    open=dispatch_pb2.OpenStream(
                        worker_id=self.w.id,
                        topics=sorted(self.handlers),
                        concurrency=self.w.concurrency,
                        in_flight=in_flight,
                    )
                )
            )
            first = await call.read()
            if first is grpc.aio.EOF:
                return False, await _ended(call, "await welcome")
            if not first.HasField("welcome"):
                return False, RuntimeError("protocol error: first message is not a welcome")
            welcomed = True
            self.update_terms(first.welcome)
            self.log.info(
                "job stream open to %s (gateway %s, %d in flight, lease %.1fs, heartbeat every %.1fs)",
                target,
                first.welcome.gateway_id,
                in_flight,
                self.ttl,
                self.interval,
            )
            self.w._emit("welcome", target=target, gateway_id=first.welcome.gateway_id, in_flight=in_flight)
            sender = asyncio.create_task(self.send_credits(call, start_grace))
            while True:
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    return True, await _ended(call, "stream")
                which = msg.WhichOneof("msg")
                if which == "welcome":
                    self.update_terms(msg.welcome)
                elif which == "dispatch_state":
                    self.observe_dispatch(msg.dispatch_state, from_stream=True)
                elif which == "assignments":
                    for a in msg.assignments.jobs:
                        self.start(a)
        except asyncio.CancelledError:
            if stop.is_set() and not _current_task_cancelling():
                return welcomed, None  # the half-close grace ran out
            call.cancel()
            raise
        except Exception as e:  # AioRpcError, or the channel failing under it: reconnect
            return welcomed, e
        finally:
            stop_watch.cancel()
            if grace is not None:
                grace.cancel()
            if sender is not None:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
            if not call.done():
                call.cancel()

    async def send_credits(self, call, on_half_close: Callable[[], None]) -> None:
        """The stream's only sender after Open: one Credit with every slot
        freed since the last; half-closes the stream when the worker stops."""
        stop = self.w._stop
        stop_wait = asyncio.ensure_future(stop.wait())
        try:
            while True:
                credit_wait = asyncio.ensure_future(self.credit_wake.wait())
                await asyncio.wait({stop_wait, credit_wait}, return_when=asyncio.FIRST_COMPLETED)
                credit_wait.cancel()
                if stop.is_set():
                    on_half_close()
                    try:
                        await call.done_writing()
                    except Exception:
                        pass  # the stream is gone already
                    self.w._emit("half_closed")
                    return
                self.credit_wake.clear()
                n = self.take_unsent()
                if n == 0:
                    continue
                try:
                    await call.write(dispatch_pb2.StreamJobsRequest(credit=dispatch_pb2.Credit(slots=n)))
                except Exception:
                    return  # the read side sees the broken stream; the next Open's in_flight counts these
                self.w._emit("credit", slots=n)
        finally:
            stop_wait.cancel()

    # ---- slot ledger (slot_ledger.go)

    def opened(self) -> int:
        self.unsent = 0
        return self.held

    def assigned(self) -> int:
        self.held += 1
        return self.held

    def finished(self) -> None:
        self.held -= 1
        self.unsent += 1
        self.credit_wake.set()

    def take_unsent(self) -> int:
        n, self.unsent = self.unsent, 0
        return n

    # ---- lease terms (lease_terms.go)

    def update_terms(self, welcome) -> None:
        if welcome.HasField("lease_ttl") and d.from_pb_duration(welcome.lease_ttl) > 0:
            self.ttl = d.from_pb_duration(welcome.lease_ttl) / d.SECOND
        if welcome.HasField("heartbeat_interval") and d.from_pb_duration(welcome.heartbeat_interval) > 0:
            self.interval = d.from_pb_duration(welcome.heartbeat_interval) / d.SECOND
        self.hb_wake.set()

    # ---- executor (executor.go)

    def _wrap_handlers(self) -> dict[str, _Registration]:
        out = {}
        for topic, reg in self.w._handlers.items():
            h = self._as_coroutine(reg.handler)
            for m in reversed(self.w._middleware):
                h = (lambda mw, nxt: (lambda job: mw(job, nxt)))(m, h)
            out[topic] = _Registration(h, reg.timeout_us)
        return out

    def _as_coroutine(self, fn: Handler):
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
            return fn

        async def in_thread(job: Job):
            fut = self.loop.run_in_executor(self.threads, fn, job)
            cancelled = False
            while True:
                try:
                    res = await asyncio.shield(fut)
                    break
                except asyncio.CancelledError:
                    # A thread cannot be interrupted: keep the slot until it
                    # returns (job.stopping tells it to), then stop.
                    if fut.done():
                        raise
                    cancelled = True
            if cancelled:
                raise asyncio.CancelledError()
            if inspect.isawaitable(res):
                res = await res
            return res

        return in_thread

    def start(self, a) -> None:
        """Runs one assignment; never drops a claimed job: beyond the free
        slots it waits for one."""
        key = (a.job_id, a.attempt)
        if key in self.running:
            self.log.error("gateway sent an attempt that is already running; ignoring the copy (job %s attempt %d)", *key)
            self.assigned()
            self.finished()
            return
        held = self.assigned()
        if held > self.w.concurrency:
            self.log.error("gateway sent more jobs than free slots; job %s waits for a slot (%d held)", a.job_id, held)
        timeout_us = d.from_pb_duration(a.timeout) if a.HasField("timeout") else 0
        reg = self.handlers.get(a.topic)
        if timeout_us <= 0 and reg is not None:
            timeout_us = reg.timeout_us
        job = Job(
            id=a.job_id,
            attempt=a.attempt,
            topic=a.topic,
            args=bytes(a.args),
            priority=a.priority,
            max_attempts=a.max_attempts,
            submitted_at=d.from_pb_timestamp(a.submitted_at),
            timeout=timeout_us / d.SECOND if timeout_us > 0 else None,
            traceparent=a.traceparent,
            tracestate=a.tracestate,
        )
        lease_until = a.lease_until.seconds + a.lease_until.nanos / 1e9
        quiesced = self.quiesced_scopes.get("*", False) or self.quiesced_scopes.get(a.topic, False)
        att = _Attempt(key, job, lease_until, time.monotonic(), quiesced, self.loop)
        att.timeout_us = timeout_us
        job._checkpoint = lambda: (att.quiesced, self.quiesce_changed)
        job._update = self.update_progress
        self.running[key] = att
        self.w._emit("assigned", job_id=a.job_id, attempt=a.attempt, topic=a.topic, held=held)
        t = asyncio.create_task(self.attempt(att))
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def attempt(self, att: _Attempt) -> None:
        job = att.job
        try:
            overran, err = await self.execute(att)
        except BaseException as e:  # never lose a slot, whatever happened
            overran, err = None, e
        self.running.pop(att.key, None)
        if isinstance(err, _Abandoned):
            self.log.warning(
                "abandoned an attempt whose lease expired before its handler started; this worker was stalled "
                "for longer than the lease (job %s attempt %d)",
                *att.key,
            )
            self.w._emit("abandoned", job_id=job.id, attempt=job.attempt)
            self.finished()
            return
        if overran is not None:

            def settled():
                overran.add_done_callback(lambda _: self.finished())

        elif self.behind < self.w._settle_behind:
            self.behind += 1
            self.finished()

            def settled():
                self.behind -= 1

        else:
            settled = self.finished
        res = _result(job, err)
        self.w._emit(
            "finished",
            job_id=job.id,
            attempt=job.attempt,
            outcome=dispatch_pb2.Outcome.Name(res.outcome),
            error=res.error,
        )
        self.submit(res, settled)

    async def execute(self, att: _Attempt):
        job = att.job
        if job.stop_cause is not None:
            return None, RuntimeError(f"pulse: job stopped before it started: {job.stop_cause}")
        if self.sem.locked():
            acquire = asyncio.ensure_future(self.sem.acquire())
            await asyncio.wait({acquire, att.stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not acquire.done():
                acquire.cancel()
                try:
                    await acquire
                except asyncio.CancelledError:
                    pass
            if not acquire.done() or acquire.cancelled():
                return None, RuntimeError(f"pulse: job stopped before it started: {job.stop_cause}")
            if job.stop_cause is not None:
                self.sem.release()
                return None, RuntimeError(f"pulse: job stopped before it started: {job.stop_cause}")
        else:
            await self.sem.acquire()
        released = False

        def release(_=None):
            nonlocal released
            if not released:
                released = True
                self.sem.release()

        try:
            if not await self.startable(att):
                release()
                return None, _Abandoned()
        except BaseException:
            release()
            raise
        reg = self.handlers.get(job.topic)
        if reg is None:
            release()
            return None, RuntimeError(f"pulse: no handler registered for topic {job.topic!r}")
        if att.timeout_us > 0:
            job.deadline = time.monotonic() + att.timeout_us / d.SECOND
        att.task = asyncio.create_task(self.call(reg.handler, job))
        self.active += 1
        self.tasks.add(att.task)
        att.task.add_done_callback(self.tasks.discard)

        def handler_returned(_):
            self.active -= 1
            release()

        att.task.add_done_callback(handler_returned)  # the slot is the handler's until it returns
        if job.stop_cause is not None:  # stopped while its lease was being confirmed
            att.task.cancel(str(job.stop_cause))
        self.w._emit("started", job_id=job.id, attempt=job.attempt, running=self.active)
        if att.timeout_us <= 0:
            await asyncio.wait({att.task})
            return None, self.outcome(att)
        done, _ = await asyncio.wait({att.task}, timeout=att.timeout_us / d.SECOND)
        if done:
            return None, self.outcome(att)
        att.stop(JobTimedOut(att.timeout_us))
        if not isinstance(job.stop_cause, JobTimedOut):
            # Stopped for another reason first: wait for it as without a timeout.
            await asyncio.wait({att.task})
            return None, self.outcome(att)
        done, _ = await asyncio.wait({att.task}, timeout=_TIMEOUT_GRACE)
        if done:
            return None, self.outcome(att)
        self.log.warning(
            "handler still running after its timeout; the attempt failed, and its slot stays taken until the "
            "handler returns (job %s attempt %d topic %s timeout %s)",
            job.id,
            job.attempt,
            job.topic,
            d.format_duration(att.timeout_us),
        )
        return att.task, JobTimedOut(att.timeout_us)

    def outcome(self, att: _Attempt):
        """What the finished handler task means for the attempt."""
        t, job = att.task, att.job
        if t.cancelled():
            err = job.stop_cause or RuntimeError("pulse: handler cancelled")
        else:
            err = t.exception()
        if isinstance(job.stop_cause, JobTimedOut):
            return JobTimedOut(att.timeout_us, None if err is job.stop_cause else err)
        return err

    async def call(self, h, job: Job):
        try:
            value = await h(job)
            if value is not None:
                try:
                    job.result = encode_result(job.id, value)
                except ValueError as e:
                    raise Permanent(e) from e  # the same value every attempt
            return value
        except (asyncio.CancelledError, StopCause):
            raise
        except Exception as e:
            self.log.debug(
                "handler failed (job %s attempt %d topic %s): %s",
                job.id,
                job.attempt,
                job.topic,
                "".join(traceback.format_exception_only(type(e), e)).strip(),
                exc_info=self.log.isEnabledFor(logging.DEBUG),
            )
            raise

    async def update_progress(self, req):
        req.worker_id = self.w.id
        return await self.current().UpdateProgress(req, metadata=self.md, timeout=_RPC_TIMEOUT)

    # ---- stale leases (stale_lease.go)

    async def startable(self, att: _Attempt) -> bool:
        if att.given:
            return False
        now = time.monotonic()
        if now - att.renewed_at < self.ttl * 3 / 4 and time.time() < att.lease_until - self.ttl / 4:
            return True
        return await self.confirm(att.key)

    async def confirm(self, key) -> bool:
        sent_at = time.monotonic()
        try:
            resp = await self.current().Heartbeat(
                dispatch_pb2.HeartbeatRequest(worker_id=self.w.id, jobs=[dispatch_pb2.JobRef(job_id=key[0], attempt=key[1])]),
                metadata=self.md,
                timeout=min(_RPC_TIMEOUT, self.ttl),
            )
        except Exception as e:
            self.log.warning("could not confirm a stale-looking lease; not starting job %s attempt %d: %s", *key, _describe(e))
            return False
        self.apply(resp, sent_at)
        for r in resp.results:
            if (r.job_id, r.attempt) == key:
                return r.lease_held and not r.canceled
        return False

    # ---- heartbeater (heartbeater.go)

    async def heartbeater(self) -> None:
        while True:
            self.hb_wake.clear()
            try:
                await asyncio.wait_for(self.hb_wake.wait(), self.interval)
                if not self.beat_now:
                    continue  # new terms: restart the timer with the new interval
            except asyncio.TimeoutError:
                pass
            self.beat_now = False
            try:
                await self.beat()
            except Exception:  # a bug here must not end the heartbeats of every job
                self.log.exception("heartbeat failed")

    async def beat(self) -> None:
        refs = [dispatch_pb2.JobRef(job_id=k[0], attempt=k[1]) for k, a in self.running.items() if not a.given]
        if not refs:
            return
        sent_at = time.monotonic()
        resp = None
        try:
            resp = await self.current().Heartbeat(
                dispatch_pb2.HeartbeatRequest(worker_id=self.w.id, jobs=refs),
                metadata=self.md,
                timeout=min(_RPC_TIMEOUT, self.ttl),
            )
        except Exception as e:  # renews nothing; a lease TTL without renewal gives up below
            self.log.warning("heartbeat of %d jobs failed: %s", len(refs), _describe(e))
        self.apply(resp, sent_at)
        now = time.monotonic()
        for a in list(self.running.values()):
            if not a.given and now - a.renewed_at > self.ttl:
                a.given = True
                a.stop(LeaseLost())
                self.log.error("lease presumed lost: not renewed within the lease TTL (job %s attempt %d)", *a.key)
                self.w._emit("stopping", job_id=a.key[0], attempt=a.key[1], cause="lease_lost")

    def apply(self, resp, sent_at: float) -> None:
        if resp is None:
            return
        current = self.observe_dispatch(resp.dispatch_state if resp.HasField("dispatch_state") else None, False)
        for r in resp.results:
            key = (r.job_id, r.attempt)
            a = self.running.get(key)
            if r.canceled:
                if a is not None and not a.given:
                    a.given = True
                    a.stop(JobCanceled())
                    self.log.info("job %s canceled, stopping its handler", r.job_id)
                    self.w._emit("stopping", job_id=r.job_id, attempt=r.attempt, cause="canceled")
            elif not r.lease_held:
                if a is not None and not a.given:
                    a.given = True
                    a.stop(LeaseLost())
                    self.log.warning("lease of job %s attempt %d lost, stopping its handler", *key)
                    self.w._emit("stopping", job_id=r.job_id, attempt=r.attempt, cause="lease_lost")
            elif a is not None and not a.given:
                a.lease_until = r.lease_until.seconds + r.lease_until.nanos / 1e9
                a.renewed_at = sent_at
                self.w._emit("renewed", job_id=r.job_id, attempt=r.attempt, lease_until=a.lease_until)
                if current and a.quiesced != r.quiesced:
                    a.quiesced = r.quiesced
                    self._quiesce_changed()

    # ---- dispatch state and quiesce (dispatch_control.go, checkpoint.go)

    def _quiesce_changed(self) -> None:
        self.quiesce_changed.set_result(None)
        self.quiesce_changed = self.loop.create_future()

    def observe_dispatch(self, st, from_stream: bool) -> bool:
        if st is None:
            return True
        newer = st.version > self.version
        current = st.version >= self.version
        paused = len(st.paused_scopes) > 0
        if newer:
            self.version = st.version
            scopes = {
                s.scope: True
                for s in st.paused_scopes
                if s.paused and s.mode == dispatch_control_pb2.PAUSE_MODE_QUIESCE
            }
            self.quiesced_scopes = scopes
            changed = False
            for a in self.running.values():
                q = scopes.get("*", False) or scopes.get(a.job.topic, False)
                if a.quiesced != q:
                    a.quiesced, changed = q, True
            if changed:
                self._quiesce_changed()
            if paused:
                self.log.info(
                    "dispatch paused by an operator; this worker's paused topics get no new jobs (version %d, scopes %s)",
                    st.version,
                    ", ".join(f"{s.scope}:{'quiesce' if s.mode == dispatch_control_pb2.PAUSE_MODE_QUIESCE else 'drain'}" for s in st.paused_scopes),
                )
            elif self.was_paused:
                self.log.info("dispatch resumed (version %d)", st.version)
            self.was_paused = paused
            self.w._emit("dispatch_state", version=st.version, paused=paused, quiesced=sorted(scopes))
            if from_stream:
                self.beat_now = True
                self.hb_wake.set()
        return current

    # ---- reporter (reporter.go)

    def submit(self, res, settled: Callable[[], None]) -> None:
        if self.closed:
            settled()
            self.log.error(
                "result produced after shutdown, dropped; job %s will be retried after its lease expires", res.job_id
            )
            return
        self.queue.append((res, time.monotonic(), settled))
        self.report_wake.set()

    async def reporter(self) -> None:
        tokens = asyncio.Semaphore(_REPORT_CONCURRENCY)
        sends: set[asyncio.Task] = set()
        try:
            while True:
                await tokens.acquire()
                batch = await self.next_batch()
                if batch is None:
                    tokens.release()
                    break
                t = asyncio.create_task(self.send(batch))
                sends.add(t)
                t.add_done_callback(lambda t: (sends.discard(t), tokens.release()))
            if sends:
                await asyncio.gather(*sends, return_exceptions=True)
        except asyncio.CancelledError:
            for t in sends:
                t.cancel()
            await asyncio.gather(*sends, return_exceptions=True)
            raise

    async def next_batch(self):
        while True:
            if self.queue:
                n = _batch_len(self.queue, self.w._max_report_batch)
                batch, self.queue = self.queue[:n], self.queue[n:]
                return batch
            if self.closing:
                self.closed = True
                return None
            self.report_wake.clear()
            await self.report_wake.wait()

    async def send(self, batch) -> None:
        bo = _Backoff(_REPORT_RETRY_MIN, _REPORT_RETRY_MAX)
        try:
            while True:
                req = dispatch_pb2.ReportResultRequest(worker_id=self.w.id, results=[p[0] for p in batch])
                try:
                    resp = await self.current().ReportResult(req, metadata=self.md, timeout=_RPC_TIMEOUT)
                except Exception as e:  # retried until the results are a lease TTL old
                    now = time.monotonic()
                    expired = [p for p in batch if now - p[1] > self.ttl]
                    batch = [p for p in batch if now - p[1] <= self.ttl]
                    self.log_dropped(expired, "result not reported within the lease TTL; the reaper will retry the job", e)
                    if not batch:
                        return
                    delay = bo.next()
                    self.log.warning("report of %d results failed, retrying in %.2fs: %s", len(batch), delay, _describe(e))
                    await asyncio.sleep(delay)
                    continue
                for ack in resp.acks:
                    ok = ack.code == _OK
                    if not ok:
                        self.log.warning(
                            "result rejected (job %s attempt %d): %s %s",
                            ack.job_id,
                            ack.attempt,
                            _code_name(ack.code),
                            ack.message,
                        )
                    self.w._emit(
                        "reported",
                        job_id=ack.job_id,
                        attempt=ack.attempt,
                        accepted=ok,
                        code=_code_name(ack.code),
                        message=ack.message,
                    )
                _settle_all(batch)
                batch = []
                return
        finally:
            if batch:  # cancelled: the worker stopped before they were delivered
                self.log_dropped(batch, "worker stopped before results could be reported", None)

    def drop_queued(self, reason: str) -> None:
        batch, self.queue = self.queue, []
        self.closed = True
        self.log_dropped(batch, reason, None)

    def log_dropped(self, batch, reason: str, err) -> None:
        for res, _, _ in batch:
            self.log.error("result dropped: %s (job %s attempt %d)%s", reason, res.job_id, res.attempt, f": {_describe(err)}" if err else "")
        _settle_all(batch)


class _Abandoned(Exception):
    """The attempt's lease lapsed before its handler started."""


def _batch_len(queue, max_batch: int) -> int:
    """How many queued results the next batch takes: at most max_batch,
    and no more than fit in MAX_REPORT_BATCH_BYTES of results and error
    texts (at least one), so a batch of large results fits one message."""
    n = min(len(queue), max_batch)
    size = 0
    for i in range(n):
        res = queue[i][0]
        size += len(res.result) + len(res.error.encode())
        if size > d.MAX_REPORT_BATCH_BYTES and i > 0:
            return i
    return n


def _settle_all(batch) -> None:
    for _, _, settled in batch:
        settled()


def _result(job: Job, err: BaseException | None) -> dispatch_pb2.JobResult:
    res = dispatch_pb2.JobResult(job_id=job.id, attempt=job.attempt, outcome=dispatch_pb2.OUTCOME_COMPLETE)
    if err is None:
        if job.result is not None:
            res.result = job.result
        return res
    if permanent_in(err):
        res.outcome = dispatch_pb2.OUTCOME_FAIL_PERMANENT
    elif (sn := snooze_in(err)) is not None:
        res.outcome = dispatch_pb2.OUTCOME_SNOOZE
        res.retry_after.CopyFrom(d.to_pb_duration(sn.delay_us))
        return res  # not a failure: nothing joins the error history
    else:
        res.outcome = dispatch_pb2.OUTCOME_FAIL
        ra = retry_after_in(err)
        if ra is not None:
            res.retry_after.CopyFrom(d.to_pb_duration(ra.delay_us))
    res.error = error_text(err)
    return res


TRUNCATED_MARK = "…[truncated]"


def error_text(err: BaseException | str, max_bytes: int = d.MAX_REPORTED_ERROR_BYTES) -> str:
    """err rendered for the wire and for storage (errtext.Sanitize): NUL and
    lone surrogates (what invalid UTF-8 decodes to) become U+FFFD, and the
    text is at most max_bytes of UTF-8, cut on a character boundary and
    marked."""
    s = err if isinstance(err, str) else (str(err) or type(err).__name__)
    if "\x00" in s or any("\ud800" <= c <= "\udfff" for c in s):
        s = "".join("\ufffd" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in s)
    raw = s.encode("utf-8")
    if len(raw) <= max_bytes:
        return s
    keep = max(max_bytes - len(TRUNCATED_MARK.encode()), 0)
    return raw[:keep].decode("utf-8", errors="ignore") + TRUNCATED_MARK


class _Backoff:
    def __init__(self, lo: float, hi: float, jitter: bool = False) -> None:
        self.lo, self.hi, self.jitter, self.cur = lo, hi, jitter, 0.0

    def next(self) -> float:
        self.cur = self.lo if self.cur == 0 else min(self.cur * 2, self.hi)
        if not self.jitter:
            return self.cur
        return self.cur / 2 + random.random() * self.cur / 2

    def reset(self) -> None:
        self.cur = 0.0


async def _ended(call, what: str) -> BaseException:
    code = await call.code()
    details = await call.details()
    if code == grpc.StatusCode.OK:
        return RuntimeError(f"{what}: the gateway ended the stream")
    return _StreamError(code, details)


class _StreamError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def _code(err) -> grpc.StatusCode | None:
    if err is None:
        return None
    c = getattr(err, "code", None)
    return c() if callable(c) else None


def _describe(err) -> str:
    if err is None:
        return ""
    if isinstance(err, grpc.aio.AioRpcError):
        return f"{err.code().name}: {err.details()}"
    return str(err)


def _code_name(code: int) -> str:
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c.name
    return str(code)


def _current_task_cancelling() -> bool:
    t = asyncio.current_task()
    return t is not None and t.cancelling() > 0


def _positive(what: str, n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ConfigError(f"pulse: {what} must be a positive int, got {n!r}")


def _default_worker_id() -> str:
    host = socket.gethostname() or "worker"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"
