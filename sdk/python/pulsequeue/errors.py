"""Errors a handler raises to steer its job, and the causes the worker
gives when it stops a handler: the Python side of pkg/pulse/errors.go."""

from __future__ import annotations

from ._durations import MAX_RETRY_DELAY, clamp_retry_delay, format_duration, to_micros


class PulseError(Exception):
    """Base class of every error the SDK raises itself."""


class ConfigError(PulseError, ValueError):
    """An option, topic or job property is out of range or malformed; the
    message names it. Raised before anything is sent."""


class PlaintextCredentialsError(ConfigError):
    """Credentials would cross a plaintext connection to an address that is
    not loopback. Configure TLS, or pass allow_plaintext_credentials=True on
    a network you trust (the services refuse the same unless
    PULSE_ALLOW_PLAINTEXT_CREDENTIALS=true)."""


class WorkerRefused(PulseError):
    """Before any gateway welcomed the worker, every gateway refused it for
    what it is: its credentials (UNAUTHENTICATED, PERMISSION_DENIED), what it
    asked for (INVALID_ARGUMENT: worker id, topics, concurrency) or its
    worker id streaming under another identity (ALREADY_EXISTS). Retrying
    cannot help, so Worker.run raises this instead of reconnecting."""


class NotRunning(PulseError):
    """set_progress and set_metadata: the job's attempt is no longer this
    worker's to report on (it finished, was canceled, or its lease was
    lost), or the job is not run by a worker."""


class StopCause(PulseError):
    """Why the worker stopped a running handler. The handler's task is
    cancelled with the cause's text as the cancellation message, and
    ``job.stop_cause`` holds the cause itself."""


class LeaseLost(StopCause):
    """The worker no longer holds the job's lease (the gateway says so, or
    heartbeats failed for longer than the lease TTL): another worker may be
    running the job already, and this attempt's report will be refused."""

    def __init__(self) -> None:
        super().__init__("pulse: job lease lost")


class JobCanceled(StopCause):
    """The job was canceled while it ran; its report will be refused."""

    def __init__(self) -> None:
        super().__init__("pulse: job canceled")


class WorkerShutdown(StopCause):
    """The worker is shutting down and the handler outlived the shutdown
    timeout."""

    def __init__(self) -> None:
        super().__init__("pulse: worker shutting down")


class JobTimedOut(StopCause):
    """The attempt's timeout passed: the attempt fails with "timed out after
    <timeout>" and is retried like any failure."""

    def __init__(self, timeout_us: int, err: BaseException | None = None) -> None:
        self.timeout_us = timeout_us
        self.err = err
        msg = "timed out after " + format_duration(timeout_us)
        if err is not None and not isinstance(err, (JobTimedOut,)) and str(err):
            msg += ": " + str(err)
        super().__init__(msg)


class Permanent(PulseError):
    """Raise ``Permanent(err)`` (or ``Permanent("why")``) from a handler to
    dead-letter the job now, whatever attempts remain: a retry cannot
    succeed (malformed arguments, a resource that no longer exists)."""

    def __init__(self, err: BaseException | str) -> None:
        self.err = err
        super().__init__(str(err))


class RetryAfter(PulseError):
    """Raise ``RetryAfter(delay, err)`` from a handler to fail the attempt
    and have the next one start ``delay`` from now (seconds or a timedelta)
    instead of after the job's backoff. The attempt counts like any other,
    so on the last one the job is dead-lettered. The delay is clamped to
    1ms..366d and rounded up to a microsecond."""

    def __init__(self, delay, err: BaseException | str | None = None) -> None:
        self.delay_us = clamp_retry_delay(to_micros("retry after", delay, round_up=True))
        self.err = err
        if err is None:
            text = "retry requested after " + format_duration(self.delay_us)
        else:
            text = str(err)
        super().__init__(text)


class Snooze(PulseError):
    """Raise ``Snooze(delay)`` from a handler to put its job back to PENDING
    for delay (seconds or a timedelta) without spending an attempt: the job
    is not failed, nothing joins its error history, and its next claim
    still gets a new attempt number (the lease's fence), while the attempts
    it has spent, which max_attempts bounds, stay where they were. For a
    job that cannot run yet through no fault of its own (a resource busy,
    an upstream not ready). The delay is clamped to 0..366d and rounded up
    to a microsecond; 0 makes the job claimable again at once. Permanent or
    RetryAfter around it win."""

    def __init__(self, delay=0) -> None:
        us = to_micros("snooze", delay, round_up=True)
        self.delay_us = min(max(us, 0), MAX_RETRY_DELAY)
        super().__init__("job snoozed for " + format_duration(self.delay_us))


def snooze_in(err: BaseException | None) -> Snooze | None:
    """The Snooze in err's chain, unless a RetryAfter is in it too."""
    if retry_after_in(err) is not None:
        return None
    return _find(err, Snooze)


def permanent_in(err: BaseException | None) -> bool:
    """Whether err, or an error in its cause/context chain, is Permanent."""
    return _find(err, Permanent) is not None


def retry_after_in(err: BaseException | None) -> RetryAfter | None:
    """The RetryAfter in err's chain, if any."""
    return _find(err, RetryAfter)


def _find(err, kind):
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, kind):
            return err
        if isinstance(err, (Permanent, RetryAfter)) and isinstance(getattr(err, "err", None), BaseException):
            err = err.err
            continue
        err = err.__cause__  # explicit wrapping only (raise X from Y), like errors.Is
    return None
