"""A real pulse fleet for the tests that speak the protocol.

When PULSE_SDK_TEST_CONTROL and PULSE_SDK_TEST_GATEWAYS name one (a
harness started it), the tests use it with PULSE_SDK_TEST_* credentials.
Otherwise the first test that needs a fleet builds and starts
deploy/localfleet's pulse-dev (a throwaway Postgres, control-api, two
gateways, reaper, scheduler, with the development users) and the module
teardown stops it. Nothing is skipped: without Go or Postgres these tests
fail, saying why."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

# The fleet's lease terms: short, so cancellation and lost leases are seen
# within a second or two instead of the production ten.
LEASE_TTL = "4s"
HEARTBEAT_INTERVAL = "1s"

# PATIENCE bounds every wait for an event in these tests; it matches
# pkg/server/proctest.Patience, the one patience of the Go tests.
PATIENCE = 60.0


class Fleet:
    control: str
    gateways: list[str]
    creds: dict[str, tuple[str, str]]

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.tmp: str | None = None

    def conn(self, role: str) -> dict:
        user, pw = self.creds.get(role, (None, None))
        return {} if user is None else {"user": user, "password": pw}

    def start(self) -> None:
        env = os.environ
        if env.get("PULSE_SDK_TEST_CONTROL") and env.get("PULSE_SDK_TEST_GATEWAYS"):
            self.control = env["PULSE_SDK_TEST_CONTROL"]
            self.gateways = env["PULSE_SDK_TEST_GATEWAYS"].split(",")
            self.creds = {}
            for role in ("producer", "worker", "operator"):
                u = env.get(f"PULSE_SDK_TEST_{role.upper()}_USER")
                if u:
                    self.creds[role] = (u, env.get(f"PULSE_SDK_TEST_{role.upper()}_PASSWORD", ""))
            return
        if shutil.which("go") is None:
            raise RuntimeError("the fleet tests need Go to build pulse-dev (or PULSE_SDK_TEST_CONTROL/_GATEWAYS)")
        subprocess.run([os.path.join(REPO, "scripts", "ensure-postgres.sh")], check=True)
        self.tmp = tempfile.mkdtemp(prefix="pulse-sdk-py-")
        binary = os.path.join(self.tmp, "pulse-dev")
        subprocess.run(["go", "build", "-o", binary, "./deploy/localfleet/cmd/pulse-dev"], cwd=REPO, check=True)
        fenv = dict(env, PULSE_LEASE_TTL=LEASE_TTL, PULSE_HEARTBEAT_INTERVAL=HEARTBEAT_INTERVAL)
        self.proc = subprocess.Popen(
            [binary, "-demo=false", "-status=0", "-gateways=2"],
            cwd=REPO,
            env=fenv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: list[str] = []
        found: dict[str, str] = {}
        ready = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.append(line)
                m = re.match(r"\s*control-api grpc:\s*(\S+)", line)
                if m:
                    found["control"] = m.group(1)
                m = re.match(r"\s*gateways grpc:\s*(\S+)", line)
                if m:
                    found["gateways"] = m.group(1)
                if "Ctrl-C stops everything" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        # Building the services and starting Postgres is most of it.
        if not ready.wait(5 * PATIENCE) or "control" not in found or "gateways" not in found:
            self.stop()
            raise RuntimeError("pulse-dev did not come up; its output:\n" + "".join(lines[-40:]))
        self.control = found["control"]
        self.gateways = found["gateways"].split(",")
        self.creds = {
            "producer": ("producer", "dev-producer"),
            "worker": ("worker", "dev-worker"),
            "operator": ("operator", "dev-operator"),
        }
        atexit.register(self.stop)

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if p is not None and p.stdout is not None:
            p.stdout.close()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


_fleet: Fleet | None = None
_lock = threading.Lock()


def fleet() -> Fleet:
    global _fleet
    with _lock:
        if _fleet is None:
            f = Fleet()
            f.start()
            _fleet = f
        return _fleet


def stop() -> None:
    global _fleet
    with _lock:
        if _fleet is not None:
            _fleet.stop()
            _fleet = None


async def eventually(what: str, cond, patience: float = PATIENCE, every: float = 0.05):
    """Polls cond (a function, or a coroutine function) until it returns a
    truthy value, within the shared patience; fails naming what."""
    import asyncio
    import inspect

    deadline = time.monotonic() + patience
    while True:
        v = cond()
        if inspect.isawaitable(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {patience}s waiting for {what}")
        await asyncio.sleep(every)
