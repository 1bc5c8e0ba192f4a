"""pulse for Python: enqueue jobs through control-api and run them from
dispatch-gateway replicas, over the same gRPC protocol as the Go SDK.

    client = pulsequeue.Client("localhost:50051", user="producer", password="dev-producer")
    await client.enqueue("email.send", {"to": "a@example.com"}, priority=7)

    worker = pulsequeue.Worker(["localhost:50052"], concurrency=8, user="worker", password="dev-worker")
    worker.register("email.send", send_email)   # async def send_email(job): ...
    await worker.run()                          # until SIGTERM / SIGINT / worker.stop()
"""

from ._conn import TLS, loopback_target
from ._version import __version__
from .client import (
    AttemptError,
    Client,
    ExponentialBackoff,
    FixedBackoff,
    JobInfo,
    JobRequest,
    ScopeStatus,
    Submitted,
)
from .errors import (
    ConfigError,
    JobCanceled,
    JobTimedOut,
    LeaseLost,
    NotRunning,
    Permanent,
    PlaintextCredentialsError,
    PulseError,
    RetryAfter,
    Snooze,
    StopCause,
    WorkerRefused,
    WorkerShutdown,
)
from .job import Job
from .worker import DEFAULT_CONCURRENCY, DEFAULT_MAX_REPORT_BATCH, DEFAULT_SHUTDOWN_TIMEOUT, Worker, error_text

__all__ = [
    "AttemptError",
    "Client",
    "ConfigError",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_REPORT_BATCH",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "ExponentialBackoff",
    "FixedBackoff",
    "Job",
    "JobCanceled",
    "JobInfo",
    "JobRequest",
    "JobTimedOut",
    "LeaseLost",
    "NotRunning",
    "Permanent",
    "PlaintextCredentialsError",
    "PulseError",
    "RetryAfter",
    "ScopeStatus",
    "Snooze",
    "StopCause",
    "Submitted",
    "TLS",
    "Worker",
    "WorkerRefused",
    "WorkerShutdown",
    "__version__",
    "error_text",
    "loopback_target",
]
