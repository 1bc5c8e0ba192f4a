"""The job a handler runs (pkg/pulse/job.go), and checkpoints
(checkpoint.go)."""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
from typing import Any

from .errors import StopCause


class Job:
    """One attempt of one job, as its handler sees it.

    id + attempt is the deduplication key for at-least-once delivery.
    args is the JSON the producer enqueued, byte for byte (``json()``
    decodes it). timeout is this attempt's bound in seconds (the job's own,
    else its topic's, else None); deadline is when it passes, on
    time.monotonic()'s clock.

    When the worker stops the attempt it cancels the handler's task, with
    the cause's text as the cancellation message, and sets stop_cause:
    LeaseLost, JobCanceled, WorkerShutdown or JobTimedOut. A handler that
    runs in a thread (a plain function) cannot be interrupted: it should
    watch ``stopping`` (a threading.Event) and return when it is set."""

    __slots__ = (
        "id",
        "attempt",
        "topic",
        "args",
        "priority",
        "max_attempts",
        "submitted_at",
        "timeout",
        "traceparent",
        "tracestate",
        "stop_cause",
        "stopping",
        "deadline",
        "result",
        "_checkpoint",
        "_update",
    )

    def __init__(
        self,
        *,
        id: str,
        attempt: int,
        topic: str,
        args: bytes,
        priority: int = 0,
        max_attempts: int = 0,
        submitted_at: datetime.datetime | None = None,
        timeout: float | None = None,
        traceparent: str = "",
        tracestate: str = "",
    ) -> None:
        self.id = id
        self.attempt = attempt
        self.topic = topic
        self.args = args
        self.priority = priority
        self.max_attempts = max_attempts
        self.submitted_at = submitted_at
        self.timeout = timeout
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.stop_cause: StopCause | None = None
        self.stopping = threading.Event()
        # deadline is when the attempt's timeout passes, on time.monotonic()'s
        # clock (None without a timeout): set as the handler starts.
        self.deadline: float | None = None
        # result is what set_result recorded (JSON bytes), None for none.
        self.result: bytes | None = None
        # _update sends an UpdateProgressRequest to a gateway; set by the
        # worker, None outside one.
        self._update = None
        self._checkpoint = None

    def json(self) -> Any:
        """The args decoded from JSON. Raise Permanent(err) around a failure
        when retrying the same bytes cannot help."""
        try:
            return json.loads(self.args)
        except ValueError as e:
            raise ValueError(f"pulse: unmarshal args of job {self.id}: {e}") from e

    def set_result(self, value: Any) -> None:
        """Records value as the job's result, stored with its completion:
        Client.get and Client.wait return it until retention deletes the
        job. bytes are sent as they are when they hold JSON; anything else
        is JSON-encoded. A later call replaces an earlier one, and a
        handler that returns something other than None sets its return
        value instead; a failed attempt stores none. A result is an answer,
        not a file: above 1 MiB it is refused here (ValueError), and a
        gateway stores at most its PULSE_MAX_RESULT_BYTES (64 KiB unless
        configured), dead-lettering a larger one."""
        self.result = encode_result(self.id, value)

    async def set_progress(self, percent: int) -> None:
        """Records how far the running attempt has come, 0 to 100, where
        operators and callers see it (JobInfo.progress, the dashboard). It
        is sent to the gateway at once and stored only while this worker
        holds the attempt's lease: NotRunning says it no longer does. The
        value outlives the attempt. Call it at steps, not in a tight loop:
        each call is a round trip and a row update."""
        from .errors import ConfigError
        from .pb.pulse.v1 import dispatch_pb2

        if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
            raise ConfigError(f"pulse: progress of job {self.id} is {percent!r}; it must be an int between 0 and 100")
        await self._send_progress(dispatch_pb2.UpdateProgressRequest(progress=percent))

    async def set_metadata(self, kv: dict) -> None:
        """Merges kv into the job's metadata, a JSON object operators and
        callers see beside its progress (the stage it is at, counts, an
        upstream id): each key replaces the same key, the others stay.
        Fenced as set_progress is; at most 64 KiB per call."""
        from ._durations import MAX_METADATA_PATCH_BYTES
        from .errors import ConfigError
        from .pb.pulse.v1 import dispatch_pb2

        if not isinstance(kv, dict):
            raise ConfigError(f"pulse: metadata of job {self.id} must be a dict, got {type(kv).__name__}")
        try:
            b = json.dumps(kv, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise ConfigError(f"pulse: encode metadata of job {self.id}: {e}") from e
        if len(b) > MAX_METADATA_PATCH_BYTES:
            raise ConfigError(f"pulse: metadata of job {self.id} is {len(b)} bytes; the limit is {MAX_METADATA_PATCH_BYTES}")
        await self._send_progress(dispatch_pb2.UpdateProgressRequest(metadata=b))

    async def _send_progress(self, req) -> None:
        from .errors import NotRunning

        if self._update is None:
            raise NotRunning("pulse: the attempt is not running on this worker")
        req.job_id, req.attempt = self.id, self.attempt
        resp = await self._update(req)
        if not resp.held:
            raise NotRunning(f"pulse: the attempt is not running on this worker (job {self.id}, attempt {self.attempt})")

    async def checkpoint(self) -> None:
        """safe_point's former name: it only ever waited while the job's
        scope is quiesced, and saves nothing (set_progress and set_metadata
        record how far a job has come)."""
        await self.safe_point()

    async def safe_point(self) -> None:
        """A safe point in the handler. While an operator has paused the
        job's scope (its topic, or all dispatch) in quiesce mode it waits,
        the worker keeping the lease alive; it returns as soon as the scope
        is resumed (or switched to drain). It returns at once when nothing
        is quiesced; if the attempt was stopped it raises the stop cause."""
        while True:
            if self.stop_cause is not None:
                raise self.stop_cause
            cp = self._checkpoint
            if cp is None:
                return
            quiesced, changed = cp()
            if not quiesced:
                return
            await asyncio.shield(changed)

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, attempt={self.attempt}, topic={self.topic!r})"


def encode_result(job_id: str, value: Any) -> bytes:
    from ._durations import MAX_RESULT_BYTES

    if isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
        try:
            json.loads(b.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ValueError(f"pulse: result of job {job_id} is not valid JSON") from None
    else:
        try:
            b = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise ValueError(f"pulse: encode result of job {job_id}: {e}") from e
    if len(b) > MAX_RESULT_BYTES:
        raise ValueError(f"pulse: result of job {job_id} is {len(b)} bytes; the limit is {MAX_RESULT_BYTES}")
    return b
