"""Durations as whole microseconds (the finest the schema keeps), the
limits every job is held to (pkg/pulsetype/limits.go), and Go-style
duration text, so error histories read the same whatever SDK wrote them."""

from __future__ import annotations

import datetime
import math
import re

US = 1
MS = 1000
SECOND = 1_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

# pkg/pulsetype/limits.go
MAX_TOPIC_LENGTH = 128
TOPIC_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")
MIN_PRIORITY, MAX_PRIORITY = 0, 10
MIN_MAX_ATTEMPTS, MAX_MAX_ATTEMPTS = 1, 100
MIN_TIMEOUT, MAX_TIMEOUT = SECOND, 24 * HOUR
MIN_UNIQUE_FOR, MAX_UNIQUE_FOR = SECOND, 366 * DAY
MIN_RETRY_DELAY, MAX_RETRY_DELAY = MS, 366 * DAY
MAX_IDEMPOTENCY_KEY_BYTES = 255
MAX_ERROR_BYTES = 8 << 10
MAX_REPORTED_ERROR_BYTES = MAX_ERROR_BYTES // 2
MAX_WORKER_ID_BYTES = 200
MAX_RESULT_BYTES = 1 << 20
MAX_METADATA_PATCH_BYTES = 64 << 10
MAX_TAGS = 16
MAX_TAG_LENGTH = 64
TAG_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:=/-]{0,63}\Z")
MAX_REPORT_BATCH_BYTES = 2 << 20
MAX_PAUSE_REASON_CHARS = 500


def to_micros(what: str, d, *, round_up: bool = False) -> int:
    """d (a datetime.timedelta, or seconds as an int or float) in whole
    microseconds. A float finer than a microsecond is rounded to the nearest
    one (or up, with round_up); anything else is a ConfigError naming what."""
    from .errors import ConfigError

    if isinstance(d, bool):
        raise ConfigError(f"pulse: {what} must be a timedelta or a number of seconds, got {d!r}")
    if isinstance(d, datetime.timedelta):
        return (d.days * 86400 + d.seconds) * SECOND + d.microseconds
    if isinstance(d, int):
        return d * SECOND
    if isinstance(d, float):
        if not math.isfinite(d):
            raise ConfigError(f"pulse: {what} must be finite, got {d!r}")
        us = d * SECOND
        return math.ceil(us - 1e-6) if round_up else round(us)
    raise ConfigError(f"pulse: {what} must be a timedelta or a number of seconds, got {type(d).__name__}")


def check_range(what: str, d, lo: int, hi: int) -> int:
    from .errors import ConfigError

    us = to_micros(what, d)
    if us < lo or us > hi:
        raise ConfigError(
            f"pulse: {what} {format_duration(us)} out of range {format_duration(lo)}..{format_duration(hi)}"
        )
    return us


def clamp_retry_delay(us: int) -> int:
    return min(max(us, MIN_RETRY_DELAY), MAX_RETRY_DELAY)


def format_duration(us: int) -> str:
    """Go's time.Duration.String for a whole number of microseconds:
    "30s", "1m30s", "1.5s", "250ms", "2h0m0s"."""
    if us == 0:
        return "0s"
    sign = "-" if us < 0 else ""
    us = abs(us)
    if us < SECOND:
        if us < MS:
            return f"{sign}{us}µs"
        return sign + _frac(us, MS) + "ms"
    h, rest = divmod(us, HOUR)
    m, rest = divmod(rest, MINUTE)
    secs = _frac(rest, SECOND) + "s"
    if h:
        return f"{sign}{h}h{m}m{secs}"
    if m:
        return f"{sign}{m}m{secs}"
    return sign + secs


def _frac(v: int, unit: int) -> str:
    whole, frac = divmod(v, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}." + f"{frac:0{digits}d}".rstrip("0")


def to_pb_duration(us: int):
    from google.protobuf import duration_pb2

    return duration_pb2.Duration(seconds=us // SECOND, nanos=(us % SECOND) * 1000)


def from_pb_duration(d) -> int:
    """A protobuf Duration in microseconds (0 when unset)."""
    return d.seconds * SECOND + d.nanos // 1000


def from_pb_timestamp(ts) -> datetime.datetime | None:
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return datetime.datetime.fromtimestamp(ts.seconds, tz=datetime.timezone.utc) + datetime.timedelta(
        microseconds=ts.nanos // 1000
    )


def to_pb_timestamp(t: datetime.datetime, what: str = "run_at"):
    from google.protobuf import timestamp_pb2

    from .errors import ConfigError

    if not isinstance(t, datetime.datetime):
        raise ConfigError(f"pulse: {what} must be a datetime, got {type(t).__name__}")
    if t.tzinfo is None:
        raise ConfigError(f"pulse: {what} must be timezone-aware (a naive datetime has no single instant)")
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(t.astimezone(datetime.timezone.utc).replace(tzinfo=None))
    return ts
