"""The producer: enqueue jobs through control-api, one or a batch, with
every job option the Go SDK has (pkg/pulse/client.go, options.go)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any, Awaitable, Callable, Sequence

import grpc

from . import _durations as d
from ._conn import conn_options
from ._stubs import ControlStub
from .errors import ConfigError
from .pb.pulse.v1 import control_pb2, dispatch_control_pb2, job_pb2

_EMPTY_ARGS = b"{}"
# wait: how long one WaitJob call waits before asking again (short enough
# that no proxy idles the call out), and the backoff while control-api is
# unavailable.
_WAIT_POLL = 30 * d.SECOND
_WAIT_RETRY_MIN, _WAIT_RETRY_MAX = 0.1, 5.0


@dataclasses.dataclass(frozen=True)
class ExponentialBackoff:
    """The job's own backoff: failed attempt n waits about base × 2^(n-1),
    at most max (None: the server's cap), jittered down by up to a fifth.
    Durations are timedeltas or seconds, 1ms..366d, max at least base."""

    base: Any
    max: Any = None

    def to_pb(self) -> job_pb2.RetryPolicy:
        base = d.check_range("backoff base", self.base, d.MIN_RETRY_DELAY, d.MAX_RETRY_DELAY)
        p = job_pb2.RetryPolicy(base=d.to_pb_duration(base))
        if self.max is not None:
            mx = d.check_range("backoff max", self.max, d.MIN_RETRY_DELAY, d.MAX_RETRY_DELAY)
            if mx < base:
                raise ConfigError(
                    f"pulse: backoff max {d.format_duration(mx)} is below its base {d.format_duration(base)}"
                )
            p.max.CopyFrom(d.to_pb_duration(mx))
        return p


@dataclasses.dataclass(frozen=True)
class FixedBackoff:
    """The job's own backoff: every failed attempt waits exactly delay
    (a timedelta or seconds, 1ms..366d)."""

    delay: Any

    def to_pb(self) -> job_pb2.RetryPolicy:
        us = d.check_range("fixed backoff", self.delay, d.MIN_RETRY_DELAY, d.MAX_RETRY_DELAY)
        return job_pb2.RetryPolicy(fixed=d.to_pb_duration(us))


@dataclasses.dataclass
class JobRequest:
    """One job: its topic, args and options. ``Client.enqueue_many`` takes a
    list of them, and every enqueue interceptor sees one.

    args is sent as-is when it is bytes (so large integers and key order
    survive), as {} when None, and JSON-encoded otherwise.

    Options (all optional): priority 0..10 (higher first); max_attempts
    1..100; run_at (an aware datetime) or delay (seconds or a timedelta,
    by the producer's clock); idempotency_key (while a job with the key is
    live, enqueuing again returns it as a duplicate); timeout per attempt
    (1s..24h); unique_for (1s..366d: unique by topic and args, compared as
    JSON values); backoff (ExponentialBackoff or FixedBackoff); tags
    (labels listings filter by: at most 16, each 1..64 letters, digits,
    '.', '_', ':', '=', '/' or '-' starting with a letter or digit;
    duplicates dropped; they never change); replace_key (debounce: while a
    job of the topic enqueued with the key is pending and has never
    started, enqueuing changes that job instead of adding one, as
    replace_mode says: "replace" (the default: args and run time),
    "keep_earlier_run_at" or "keep_first"; not with idempotency_key or
    unique_for); rate_key (the key a topic rate-limited per job key counts
    the start under, 1..255 bytes, docs/flow-control.md); concurrency_key
    (the key a topic's max_running_per_key counts the job under while it
    runs, 1..255 bytes); sequence_key (start only after every earlier job
    of the topic with this key has finished, 1..255 bytes; the topic needs
    a sequence policy)."""

    topic: str
    args: Any = None
    priority: int | None = None
    max_attempts: int | None = None
    run_at: datetime.datetime | None = None
    delay: Any = None
    idempotency_key: str | None = None
    timeout: Any = None
    unique_for: Any = None
    backoff: ExponentialBackoff | FixedBackoff | None = None
    tags: Sequence[str] | None = None
    replace_key: str | None = None
    replace_mode: str | None = None
    rate_key: str | None = None
    concurrency_key: str | None = None
    sequence_key: str | None = None

    def spec(self) -> job_pb2.JobSpec:
        """The wire form of the job, after the checks the Go SDK makes; a
        ConfigError names the first property out of range."""
        check_topic(self.topic)
        spec = job_pb2.JobSpec(topic=self.topic, args=encode_args(self.topic, self.args))
        if self.priority is not None:
            _check_int("priority", self.priority, d.MIN_PRIORITY, d.MAX_PRIORITY)
            spec.priority, spec.has_priority = self.priority, True
        if self.max_attempts is not None:
            _check_int("max attempts", self.max_attempts, d.MIN_MAX_ATTEMPTS, d.MAX_MAX_ATTEMPTS)
            spec.max_attempts = self.max_attempts
        if self.run_at is not None and self.delay is not None:
            raise ConfigError("pulse: set run_at or delay, not both")
        if self.run_at is not None:
            spec.run_at.CopyFrom(d.to_pb_timestamp(self.run_at))
        if self.delay is not None:
            us = d.to_micros("delay", self.delay)
            t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(microseconds=us)
            spec.run_at.CopyFrom(d.to_pb_timestamp(t))
        if self.idempotency_key:
            check_idempotency_key(self.idempotency_key)
            spec.idempotency_key = self.idempotency_key
        if self.timeout is not None:
            spec.timeout.CopyFrom(d.to_pb_duration(d.check_range("timeout", self.timeout, d.MIN_TIMEOUT, d.MAX_TIMEOUT)))
        if self.unique_for is not None:
            us = d.check_range("unique for", self.unique_for, d.MIN_UNIQUE_FOR, d.MAX_UNIQUE_FOR)
            spec.unique_for.CopyFrom(d.to_pb_duration(us))
        if self.backoff is not None:
            if not isinstance(self.backoff, (ExponentialBackoff, FixedBackoff)):
                raise ConfigError("pulse: backoff must be ExponentialBackoff(...) or FixedBackoff(...)")
            spec.retry.CopyFrom(self.backoff.to_pb())
        if self.tags:
            if isinstance(self.tags, str):
                raise ConfigError("pulse: tags must be a list of str, not a str")
            for tag in self.tags:
                if not isinstance(tag, str) or not d.TAG_PATTERN.match(tag):
                    raise ConfigError(
                        f"pulse: {tag!r} is not a tag: 1 to {d.MAX_TAG_LENGTH} letters, digits, '.', '_', ':', '=', "
                        "'/' or '-', starting with a letter or digit"
                    )
            tags = sorted(set(self.tags))
            if len(tags) > d.MAX_TAGS:
                raise ConfigError(f"pulse: {len(tags)} tags; the limit is {d.MAX_TAGS}")
            spec.tags.extend(tags)
        if self.replace_key is not None or self.replace_mode is not None:
            if not self.replace_key:
                raise ConfigError("pulse: replace_mode needs a replace_key")
            check_idempotency_key(self.replace_key, what="replace key")
            mode = _REPLACE_MODES.get(self.replace_mode or "replace")
            if mode is None:
                raise ConfigError(f"pulse: replace mode {self.replace_mode!r} is not replace, keep_earlier_run_at or keep_first")
            spec.replace_key, spec.replace_mode = self.replace_key, mode
        if self.rate_key is not None:
            if not self.rate_key:
                raise ConfigError("pulse: rate key is empty")
            check_idempotency_key(self.rate_key, what="rate key")
            spec.rate_key = self.rate_key
        if self.concurrency_key is not None:
            if not self.concurrency_key:
                raise ConfigError("pulse: concurrency key is empty")
            check_idempotency_key(self.concurrency_key, what="concurrency key")
            spec.concurrency_key = self.concurrency_key
        if self.sequence_key is not None:
            if not self.sequence_key:
                raise ConfigError("pulse: sequence key is empty")
            check_idempotency_key(self.sequence_key, what="sequence key")
            spec.sequence_key = self.sequence_key
        return spec


_REPLACE_MODES = {
    "replace": job_pb2.REPLACE_MODE_REPLACE,
    "keep_earlier_run_at": job_pb2.REPLACE_MODE_KEEP_EARLIER_RUN_AT,
    "keep_first": job_pb2.REPLACE_MODE_KEEP_FIRST,
}


@dataclasses.dataclass(frozen=True)
class Submitted:
    """The outcome of enqueuing one job. duplicate: nothing new was
    enqueued and id is an existing job's (an idempotency key matched a live
    job, or a unique_for job with the same topic and args holds its
    period, or a replace_key's pending job took its place). replaced: that
    pending job (id) took this job's args and run time."""

    id: str
    duplicate: bool = False
    replaced: bool = False


@dataclasses.dataclass(frozen=True)
class AttemptError:
    attempt: int
    error: str
    worker: str
    at: datetime.datetime | None


@dataclasses.dataclass(frozen=True)
class JobInfo:
    """A job's stored state as control-api reports it. status is PENDING,
    RUNNING, RETRYING, COMPLETED, DEAD_LETTERED or CANCELED."""

    id: str
    topic: str
    args: bytes
    priority: int
    status: str
    # attempts counts the job's claims (the latest attempt's number);
    # snoozes those that ended in Snooze. The attempts spent, which
    # max_attempts bounds, are attempts - snoozes.
    attempts: int
    max_attempts: int
    errors: tuple[AttemptError, ...]
    locked_by: str
    lease_until: datetime.datetime | None
    next_run_at: datetime.datetime | None
    submitted_at: datetime.datetime | None
    started_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    schedule_id: str
    idempotency_key: str
    timeout: float  # seconds; 0 when none
    traceparent: str = ""
    tracestate: str = ""
    # What the handler returned, as JSON bytes, for a COMPLETED job; empty
    # when it returned nothing (and in listings).
    result: bytes = b""
    # What the handler last reported of its progress, 0..100 (None when it
    # never did), and the JSON object its metadata updates built.
    progress: int | None = None
    metadata: bytes = b""

    def metadata_json(self) -> dict:
        return json.loads(self.metadata) if self.metadata else {}
    snoozes: int = 0
    tags: tuple[str, ...] = ()

    def result_json(self) -> Any:
        """The result decoded from JSON; None when there is none."""
        return json.loads(self.result) if self.result else None
    # The job's own backoff: ExponentialBackoff(base, max) or
    # FixedBackoff(delay) in seconds; None when it follows the server's.
    backoff: ExponentialBackoff | FixedBackoff | None = None

    def json(self) -> Any:
        return json.loads(self.args) if self.args else None

    @staticmethod
    def from_pb(j: job_pb2.Job) -> "JobInfo":
        status = job_pb2.JobStatus.Name(j.status).removeprefix("JOB_STATUS_")
        return JobInfo(
            id=j.id,
            topic=j.topic,
            args=bytes(j.args),
            priority=j.priority,
            status=status,
            attempts=j.attempts,
            max_attempts=j.max_attempts,
            errors=tuple(
                AttemptError(e.attempt, e.error, e.worker, d.from_pb_timestamp(e.at)) for e in j.errors
            ),
            locked_by=j.locked_by,
            lease_until=d.from_pb_timestamp(j.lease_until),
            next_run_at=d.from_pb_timestamp(j.next_run_at),
            submitted_at=d.from_pb_timestamp(j.submitted_at),
            started_at=d.from_pb_timestamp(j.started_at),
            finished_at=d.from_pb_timestamp(j.finished_at),
            schedule_id=j.schedule_id,
            idempotency_key=j.idempotency_key,
            timeout=d.from_pb_duration(j.timeout) / d.SECOND,
            backoff=_backoff_from_pb(j.retry) if j.HasField("retry") else None,
            traceparent=j.traceparent,
            tracestate=j.tracestate,
            result=bytes(j.result),
            progress=j.progress if j.HasField("progress") else None,
            metadata=bytes(j.metadata),
            snoozes=j.snoozes,
            tags=tuple(j.tags),
        )


def _backoff_from_pb(r: job_pb2.RetryPolicy):
    if r.HasField("fixed"):
        return FixedBackoff(d.from_pb_duration(r.fixed) / d.SECOND)
    mx = d.from_pb_duration(r.max) / d.SECOND if r.HasField("max") else None
    return ExponentialBackoff(d.from_pb_duration(r.base) / d.SECOND, mx)


@dataclasses.dataclass(frozen=True)
class ScopeStatus:
    """One pause scope ("*" for all dispatch, or a topic) as control-api
    reports it, with its queued and running jobs: safe to upgrade once
    drained."""

    scope: str
    paused: bool
    mode: str
    reason: str
    actor: str
    until: datetime.datetime | None
    version: int
    queued: int
    running: int
    drained: bool


EnqueueFunc = Callable[[JobRequest], Awaitable[Submitted]]
EnqueueInterceptor = Callable[[JobRequest, EnqueueFunc], Awaitable[Submitted]]


class Client:
    """Enqueues and manages jobs through control-api at target (for example
    "localhost:50051"). Share one per process: it holds a gRPC channel.
    Use it as an async context manager, or call close().

    Connection keywords: user and password (HTTP Basic) or token (Bearer);
    tls=TLS(...); allow_plaintext_credentials=True to send credentials over
    plaintext beyond loopback (a trusted network only; refused otherwise);
    metadata; channel_options. interceptors wrap every enqueue, the first
    outermost: ``async def i(req: JobRequest, next) -> Submitted``.

    Server errors are grpc.aio.AioRpcError (code() NOT_FOUND,
    INVALID_ARGUMENT, ...); a bad option is a ConfigError before any RPC."""

    def __init__(
        self,
        target: str,
        *,
        interceptors: Sequence[EnqueueInterceptor] = (),
        rpc_timeout: float | None = 30.0,
        **conn,
    ) -> None:
        if not target:
            raise ConfigError("pulse: control-api target must not be empty")
        self._conn = conn_options(conn)
        self._conn.check([target])
        self._md = self._conn.call_metadata()
        self._target = target
        # The channel is made on first use, inside the event loop that uses
        # it: a Client built at import time, before asyncio.run, works.
        self._channel: grpc.aio.Channel | None = None
        self._stub: ControlStub | None = None
        self._interceptors = list(interceptors)
        self._timeout = rpc_timeout

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def _rpc(self) -> ControlStub:
        if self._stub is None:
            self._channel = self._conn.channel(self._target)
            self._stub = ControlStub(self._channel)
        return self._stub

    async def close(self) -> None:
        """Closes the channel; a later call opens a new one."""
        if self._channel is not None:
            ch, self._channel, self._stub = self._channel, None, None
            await ch.close()

    async def _call(self, rpc, req, trace: tuple[tuple[str, str], ...] = ()):
        return await rpc(req, metadata=self._md + trace, timeout=self._timeout)

    async def enqueue(self, topic: str, args: Any = None, *, traceparent: str = "", tracestate: str = "",
                      **options) -> Submitted:
        """Submits one job to topic with JobRequest's options as keywords,
        through the client's interceptors. traceparent and tracestate (W3C
        trace context) make the job's spans join the caller's trace: the
        worker's job carries them."""
        trace = _trace_metadata(traceparent, tracestate)
        return await self._intercepted(lambda req: self._submit_one(req, trace))(JobRequest(topic, args, **options))

    async def _submit_one(self, req: JobRequest, trace=()) -> Submitted:
        resp = await self._call(self._rpc.SubmitJob, control_pb2.SubmitJobRequest(job=req.spec()), trace)
        return Submitted(resp.result.id, resp.result.duplicate, resp.result.replaced)

    async def enqueue_many(
        self, jobs: Sequence[JobRequest], *, traceparent: str = "", tracestate: str = ""
    ) -> list[Submitted]:
        """Submits jobs in one RPC that the server writes in one statement:
        every job is enqueued or none is. Results are in request order. Each
        job passes through the interceptors on its own; the batch is sent
        once every job reached the end of its chain. traceparent and
        tracestate are the batch's trace context, as for enqueue."""
        jobs = list(jobs)
        if not jobs:
            return []
        trace = _trace_metadata(traceparent, tracestate)
        if not self._interceptors:
            return await self._submit_many(jobs, trace)
        return await self._intercept_many(jobs, trace)

    async def _submit_many(self, jobs: list[JobRequest], trace=()) -> list[Submitted]:
        specs = []
        for i, j in enumerate(jobs):
            try:
                specs.append(j.spec())
            except ConfigError as e:
                raise ConfigError(f"job {i}: {e}") from e
        resp = await self._call(self._rpc.SubmitJobs, control_pb2.SubmitJobsRequest(jobs=specs), trace)
        if len(resp.results) != len(jobs):
            raise RuntimeError(f"pulse: enqueue {len(jobs)} jobs: server answered {len(resp.results)} results")
        return [Submitted(r.id, r.duplicate, r.replaced) for r in resp.results]

    async def _intercept_many(self, jobs: list[JobRequest], trace=()) -> list[Submitted]:
        import asyncio

        loop = asyncio.get_running_loop()
        arrived: list[JobRequest | None] = [None] * len(jobs)
        answers = [loop.create_future() for _ in jobs]
        all_in = loop.create_future()
        count = 0

        def tail(i):
            async def end(req: JobRequest) -> Submitted:
                nonlocal count
                arrived[i] = req
                count += 1
                if count == len(jobs) and not all_in.done():
                    all_in.set_result(None)
                return await answers[i]

            return end

        chains = [asyncio.ensure_future(self._intercepted(tail(i))(j)) for i, j in enumerate(jobs)]
        waiting = set(chains) | {all_in}
        while not all_in.done():
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not all_in and not all_in.done():
                    # A chain ended without reaching the RPC: the batch fails.
                    for c in chains:
                        c.cancel()
                    err = t.exception() or RuntimeError("pulse: an interceptor answered a batched job itself")
                    raise err
        try:
            out = await self._submit_many([r for r in arrived if r is not None], trace)
        except BaseException as e:
            for a in answers:
                a.set_exception(e)
            await asyncio.gather(*chains, return_exceptions=True)
            raise
        for a, s in zip(answers, out):
            a.set_result(s)
        return list(await asyncio.gather(*chains))

    def _intercepted(self, end: EnqueueFunc) -> EnqueueFunc:
        fn = end
        for i in reversed(self._interceptors):
            fn = (lambda inter, nxt: (lambda req: inter(req, nxt)))(i, fn)
        return fn

    async def wait(self, job_id: str, timeout: Any = None) -> JobInfo:
        """Waits until the job is finished (COMPLETED, DEAD_LETTERED or
        CANCELED) and returns it as it finished, its result included. It
        long-polls control-api (WaitJob), which the statement finishing the
        job wakes: waiting costs the database nothing. While control-api is
        unavailable (a restart) it retries with backoff. timeout (seconds
        or a timedelta) bounds the whole wait: asyncio.TimeoutError after
        it."""
        import asyncio

        if timeout is not None:
            return await asyncio.wait_for(self.wait(job_id), d.to_micros("timeout", timeout) / d.SECOND)
        delay = _WAIT_RETRY_MIN
        while True:
            req = control_pb2.WaitJobRequest(id=job_id, timeout=d.to_pb_duration(_WAIT_POLL), omit_unfinished_job=True)
            try:
                resp = await self._rpc.WaitJob(req, metadata=self._md, timeout=_WAIT_POLL / d.SECOND + 30)
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, _WAIT_RETRY_MAX)
                continue
            if resp.finished:
                return JobInfo.from_pb(resp.job)
            delay = _WAIT_RETRY_MIN

    async def enqueue_and_wait(self, topic: str, args: Any = None, *, timeout: Any = None, **options) -> JobInfo:
        """Enqueues one job (enqueue's options as keywords) and waits for it
        to finish (wait's timeout): a job that failed or was canceled is
        returned with its status; only the enqueue's or the wait's own
        failure raises."""
        s = await self.enqueue(topic, args, **options)
        return await self.wait(s.id, timeout=timeout)

    async def get(self, job_id: str) -> JobInfo:
        resp = await self._call(self._rpc.GetJob, control_pb2.GetJobRequest(id=job_id))
        return JobInfo.from_pb(resp.job)

    async def list(
        self, *, topic: str = "", status: str = "", tag: str = "", limit: int = 0, page_token: str = "",
        include_args: bool = False,
    ) -> tuple[list[JobInfo], str]:
        """One page of jobs, newest first, and the next page's token ("" on
        the last page). status is a JobInfo status name, any case; tag
        keeps the jobs carrying it."""
        st = 0
        if status:
            try:
                st = job_pb2.JobStatus.Value("JOB_STATUS_" + status.upper())
            except ValueError:
                raise ConfigError(f"pulse: unknown job status {status!r}") from None
        resp = await self._call(
            self._rpc.ListJobs,
            control_pb2.ListJobsRequest(
                topic=topic, status=st, tag=tag, limit=limit, page_token=page_token, include_args=include_args
            ),
        )
        return [JobInfo.from_pb(j) for j in resp.jobs], resp.next_page_token

    async def cancel(self, job_id: str) -> JobInfo:
        """Moves a pending, retrying or running job to CANCELED; a running
        attempt learns it on its next heartbeat (its handler is cancelled
        with JobCanceled) and its late report is refused."""
        resp = await self._call(self._rpc.CancelJob, control_pb2.CancelJobRequest(id=job_id))
        return JobInfo.from_pb(resp.job)

    async def retry(self, job_id: str) -> JobInfo:
        resp = await self._call(self._rpc.RetryJob, control_pb2.RetryJobRequest(id=job_id))
        return JobInfo.from_pb(resp.job)

    async def pause_dispatch(
        self, reason: str, *, mode: str = "drain", topic: str = "", pause_for: Any = None,
        until: datetime.datetime | None = None,
    ) -> bool:
        """Pauses dispatch (or one topic) in "drain" or "quiesce" mode;
        pause_for (seconds or a timedelta) or until (an aware datetime), at
        most one, make it resume by itself. Returns whether anything
        changed. Operator credentials only."""
        modes = {"drain": dispatch_control_pb2.PAUSE_MODE_DRAIN, "quiesce": dispatch_control_pb2.PAUSE_MODE_QUIESCE}
        if mode not in modes:
            raise ConfigError(f"pulse: unknown pause mode {mode!r}")
        req = dispatch_control_pb2.PauseDispatchRequest(reason=reason, mode=modes[mode], topic=topic)
        if pause_for is not None and until is not None:
            raise ConfigError("pulse: set pause_for or until, not both")
        if pause_for is not None:
            req.pause_for.CopyFrom(d.to_pb_duration(d.to_micros("pause for", pause_for)))
        if until is not None:
            req.until.CopyFrom(d.to_pb_timestamp(until, "until"))
        resp = await self._call(self._rpc.PauseDispatch, req)
        return resp.changed

    async def dispatch_status(self) -> list[ScopeStatus]:
        """Every pause scope, the global one first, with its queued and
        running counts."""
        resp = await self._call(self._rpc.GetDispatchState, dispatch_control_pb2.GetDispatchStateRequest())
        out = []
        for sc in resp.scopes:
            st = sc.state
            mode = "quiesce" if st.mode == dispatch_control_pb2.PAUSE_MODE_QUIESCE else "drain"
            out.append(
                ScopeStatus(st.scope, st.paused, mode, st.reason, st.actor, d.from_pb_timestamp(st.until), st.version,
                            sc.queued, sc.running, sc.drained)
            )
        return out

    async def resume_dispatch(self, topic: str = "") -> bool:
        resp = await self._call(self._rpc.ResumeDispatch, dispatch_control_pb2.ResumeDispatchRequest(topic=topic))
        return resp.changed


def _trace_metadata(traceparent: str, tracestate: str) -> tuple[tuple[str, str], ...]:
    md = []
    for name, v in (("traceparent", traceparent), ("tracestate", tracestate)):
        if v:
            if not isinstance(v, str) or not v.isascii() or not v.isprintable():
                raise ConfigError(f"pulse: {name} must be printable ASCII (a W3C trace context header)")
            md.append((name, v))
    return tuple(md)


def check_topic(topic: str) -> None:
    if not isinstance(topic, str) or topic == "":
        raise ConfigError("pulse: topic must not be empty")
    if len(topic.encode()) > d.MAX_TOPIC_LENGTH:
        raise ConfigError(f"pulse: topic is {len(topic.encode())} bytes; the limit is {d.MAX_TOPIC_LENGTH}")
    if not d.TOPIC_PATTERN.match(topic):
        raise ConfigError(
            f"pulse: topic {topic!r} has characters outside [A-Za-z0-9._:-] or does not start with a letter or digit"
        )


def check_idempotency_key(key: str, what: str = "idempotency key") -> None:
    if not isinstance(key, str):
        raise ConfigError(f"pulse: {what} must be a str")
    try:
        raw = key.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"pulse: {what} is not valid UTF-8") from None
    if len(raw) > d.MAX_IDEMPOTENCY_KEY_BYTES:
        raise ConfigError(f"pulse: {what} is {len(raw)} bytes; the limit is {d.MAX_IDEMPOTENCY_KEY_BYTES}")
    if "\x00" in key:
        raise ConfigError(f"pulse: {what} contains a NUL character")


def _check_int(what: str, v, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"pulse: {what} must be an int, got {type(v).__name__}")
    if v < lo or v > hi:
        raise ConfigError(f"pulse: {what} {v} out of range {lo}..{hi}")


def encode_args(topic: str, args: Any) -> bytes:
    if args is None:
        return _EMPTY_ARGS
    if isinstance(args, (bytes, bytearray, memoryview)):
        return bytes(args) or _EMPTY_ARGS
    try:
        return json.dumps(args, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise ConfigError(f"pulse: encode args for {topic}: {e}") from e


