"""Everything the SDK checks before a request leaves the process: job
options at and past their bounds, topics, keys, durations, connection
options, and the error text a result carries. No fleet needed."""

import datetime
import os
import subprocess
import unittest

import pulsequeue as pulse
from pulsequeue import _durations as d
from pulsequeue.client import JobRequest
from pulsequeue.errors import permanent_in, retry_after_in
from pulsequeue.pb.pulse.v1 import job_pb2


class JobOptionsTest(unittest.TestCase):
    def test_every_option_reaches_the_spec(self):
        run_at = datetime.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)
        spec = JobRequest(
            "email.send",
            {"to": "a@example.com", "n": 12345678901234567890},
            priority=7,
            max_attempts=3,
            run_at=run_at,
            idempotency_key="welcome-42",
            timeout=datetime.timedelta(seconds=90),
            unique_for=3600,
            backoff=pulse.ExponentialBackoff(2, datetime.timedelta(minutes=10)),
        ).spec()
        self.assertEqual(spec.topic, "email.send")
        self.assertEqual(spec.args, b'{"to":"a@example.com","n":12345678901234567890}')
        self.assertEqual((spec.priority, spec.has_priority, spec.max_attempts), (7, True, 3))
        self.assertEqual(spec.run_at.ToDatetime().replace(tzinfo=datetime.timezone.utc), run_at)
        self.assertEqual(spec.idempotency_key, "welcome-42")
        self.assertEqual((spec.timeout.seconds, spec.unique_for.seconds), (90, 3600))
        self.assertEqual((spec.retry.base.seconds, spec.retry.max.seconds), (2, 600))
        fixed = JobRequest("t", backoff=pulse.FixedBackoff(0.25)).spec()
        self.assertEqual((fixed.retry.fixed.seconds, fixed.retry.fixed.nanos), (0, 250_000_000))
        self.assertFalse(fixed.retry.HasField("base"))

    def test_defaults_send_nothing_but_topic_and_empty_args(self):
        spec = JobRequest("t").spec()
        self.assertEqual(spec, job_pb2.JobSpec(topic="t", args=b"{}"))
        self.assertEqual(JobRequest("t", b'{"big":1e400}').spec().args, b'{"big":1e400}')  # bytes go as they are

    def test_priority_zero_is_sent_as_set(self):
        spec = JobRequest("t", priority=0).spec()
        self.assertTrue(spec.has_priority)

    def test_bounds(self):
        ok = [
            dict(priority=0), dict(priority=10), dict(max_attempts=1), dict(max_attempts=100),
            dict(timeout=1), dict(timeout=86400), dict(unique_for=1), dict(unique_for=datetime.timedelta(days=366)),
            dict(backoff=pulse.FixedBackoff(0.001)), dict(backoff=pulse.ExponentialBackoff(1, 1)),
            dict(idempotency_key="k" * 255), dict(idempotency_key="é" * 127),
        ]
        for kw in ok:
            with self.subTest(**{k: repr(v) for k, v in kw.items()}):
                JobRequest("t", **kw).spec()
        bad = {
            "priority": dict(priority=11), "priority ": dict(priority=-1), "priority  ": dict(priority=True),
            "max attempts": dict(max_attempts=0), "max attempts ": dict(max_attempts=101),
            "timeout": dict(timeout=0.5), "timeout ": dict(timeout=86401), "timeout  ": dict(timeout=float("nan")),
            "unique for": dict(unique_for=0), "unique for ": dict(unique_for=datetime.timedelta(days=367)),
            "fixed backoff": dict(backoff=pulse.FixedBackoff(0.0001)),
            "backoff max": dict(backoff=pulse.ExponentialBackoff(10, 5)),
            "backoff base": dict(backoff=pulse.ExponentialBackoff(0)),
            "idempotency key": dict(idempotency_key="k" * 256), "idempotency key ": dict(idempotency_key="a\x00b"),
            "idempotency key  ": dict(idempotency_key="\udcff"),
            "run_at": dict(run_at=datetime.datetime(2030, 1, 1)),
            "run_at or delay": dict(run_at=datetime.datetime.now(datetime.timezone.utc), delay=1),
            "backoff must be": dict(backoff="2s"),
        }
        for name, kw in bad.items():
            with self.subTest(name=name):
                with self.assertRaises(pulse.ConfigError) as cm:
                    JobRequest("t", **kw).spec()
                self.assertIn(name.strip(), str(cm.exception))

    def test_tags(self):
        spec = JobRequest("t", tags=["tenant=acme", "batch-7", "tenant=acme", "a/b:c_d.e"]).spec()
        self.assertEqual(list(spec.tags), ["a/b:c_d.e", "batch-7", "tenant=acme"])
        JobRequest("t", tags=["x" * 64] + [f"t{i}" for i in range(15)]).spec()
        for bad, what in [(["x" * 65], "not a tag"), ([""], "not a tag"), (["-a"], "not a tag"), (["a b"], "not a tag"),
                          (["é"], "not a tag"), (["a\x00"], "not a tag"), ("tenant=acme", "not a str"),
                          ([f"t{i}" for i in range(17)], "17 tags; the limit is 16")]:
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(pulse.ConfigError, what):
                    JobRequest("t", tags=bad).spec()

    def test_concurrency_and_sequence_keys(self):
        spec = JobRequest("t", concurrency_key="tenant:acme", sequence_key="order-1").spec()
        self.assertEqual((spec.concurrency_key, spec.sequence_key), ("tenant:acme", "order-1"))
        for field in ("concurrency_key", "sequence_key"):
            for value, what in [("k" * 256, "256 bytes"), ("a\x00", "NUL"), ("", "empty")]:
                with self.subTest(field=field, value=value):
                    with self.assertRaisesRegex(pulse.ConfigError, what):
                        JobRequest("t", **{field: value}).spec()

    def test_rate_key(self):
        self.assertEqual(JobRequest("t", rate_key="tenant:acme").spec().rate_key, "tenant:acme")
        for kw, what in [({"rate_key": "k" * 256}, "256 bytes"), ({"rate_key": "a\x00"}, "NUL"), ({"rate_key": ""}, "empty")]:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(pulse.ConfigError, what):
                    JobRequest("t", **kw).spec()

    def test_replace_key(self):
        spec = JobRequest("t", replace_key="doc-7").spec()
        self.assertEqual((spec.replace_key, spec.replace_mode), ("doc-7", job_pb2.REPLACE_MODE_REPLACE))
        spec = JobRequest("t", replace_key="doc-7", replace_mode="keep_earlier_run_at").spec()
        self.assertEqual(spec.replace_mode, job_pb2.REPLACE_MODE_KEEP_EARLIER_RUN_AT)
        spec = JobRequest("t", replace_key="doc-7", replace_mode="keep_first").spec()
        self.assertEqual(spec.replace_mode, job_pb2.REPLACE_MODE_KEEP_FIRST)
        for kw, what in [({"replace_key": "k" * 256}, "256 bytes"), ({"replace_key": "a\x00"}, "NUL"),
                         ({"replace_key": "k", "replace_mode": "latest"}, "not replace"),
                         ({"replace_mode": "keep_first"}, "needs a replace_key"), ({"replace_key": ""}, "needs a replace_key")]:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(pulse.ConfigError, what):
                    JobRequest("t", **kw).spec()

    def test_topics(self):
        for t in ["a", "email.send", "A-b_c:d.e", "x" * 128]:
            JobRequest(t).spec()
        for t in ["", ".a", "a b", "a/b", "x" * 129, "é", "a\x00"]:
            with self.subTest(topic=t):
                with self.assertRaises(pulse.ConfigError) as cm:
                    JobRequest(t).spec()
                self.assertIn("topic", str(cm.exception))

    def test_args_that_are_not_json_fail_before_sending(self):
        with self.assertRaisesRegex(pulse.ConfigError, "encode args for t"):
            JobRequest("t", {"x": object()}).spec()
        with self.assertRaisesRegex(pulse.ConfigError, "encode args for t"):
            JobRequest("t", {"x": float("inf")}).spec()

    def test_delay_is_from_now(self):
        before = datetime.datetime.now(datetime.timezone.utc)
        spec = JobRequest("t", delay=datetime.timedelta(hours=1)).spec()
        at = spec.run_at.ToDatetime().replace(tzinfo=datetime.timezone.utc)
        self.assertGreaterEqual(at, before + datetime.timedelta(hours=1))


class DurationTest(unittest.TestCase):
    def test_go_style_text(self):
        cases = {30 * d.SECOND: "30s", 90 * d.SECOND: "1m30s", 1500 * d.MS: "1.5s", 250 * d.MS: "250ms",
                 2 * d.HOUR: "2h0m0s", 5: "5µs", 1500: "1.5ms", 0: "0s"}
        for us, text in cases.items():
            self.assertEqual(d.format_duration(us), text)

    def test_snooze_is_clamped_and_loses_to_retry_after_and_permanent(self):
        from pulsequeue.errors import snooze_in

        self.assertEqual(pulse.Snooze(-1).delay_us, 0)
        self.assertEqual(pulse.Snooze(10**9).delay_us, 366 * d.DAY)
        self.assertEqual(str(pulse.Snooze(90)), "job snoozed for 1m30s")
        self.assertIsNotNone(snooze_in(pulse.Snooze(1)))
        self.assertIsNone(snooze_in(pulse.RetryAfter(5, pulse.Snooze(1))))
        self.assertTrue(permanent_in(pulse.Permanent(pulse.Snooze(1))))

    def test_retry_after_is_clamped_and_rounded_up(self):
        self.assertEqual(pulse.RetryAfter(0).delay_us, d.MS)
        self.assertEqual(pulse.RetryAfter(10**9).delay_us, 366 * d.DAY)
        self.assertEqual(pulse.RetryAfter(0.0123456).delay_us, 12346)
        self.assertEqual(str(pulse.RetryAfter(30)), "retry requested after 30s")
        self.assertEqual(str(pulse.RetryAfter(30, ValueError("rate limited"))), "rate limited")


class ErrorKindsTest(unittest.TestCase):
    def test_permanent_and_retry_after_are_found_through_explicit_causes_only(self):
        try:
            try:
                raise pulse.Permanent("bad args")
            except pulse.Permanent as p:
                raise RuntimeError("wrapped") from p
        except RuntimeError as e:
            self.assertTrue(permanent_in(e))
        try:
            try:
                raise pulse.Permanent("handled")
            except pulse.Permanent:
                raise RuntimeError("a new failure while handling it")  # __context__, not a cause
        except RuntimeError as e:
            self.assertFalse(permanent_in(e))
        self.assertIsNotNone(retry_after_in(pulse.RetryAfter(5, ValueError("x"))))
        self.assertIsNone(retry_after_in(ValueError("x")))

    def test_error_text_is_storable_and_bounded(self):
        self.assertEqual(pulse.error_text("a\x00b"), "a\ufffdb")
        self.assertEqual(pulse.error_text(b"a\xffb\xc3".decode("utf-8", "surrogateescape")), "a\ufffdb\ufffd")
        long = pulse.error_text("é" * 5000)
        self.assertLessEqual(len(long.encode()), d.MAX_REPORTED_ERROR_BYTES)
        self.assertTrue(long.endswith("…[truncated]"))
        long.encode("utf-8")  # valid: never split a character
        self.assertEqual(pulse.error_text(ValueError()), "ValueError")
        self.assertEqual(str(pulse.JobTimedOut(30 * d.SECOND)), "timed out after 30s")
        self.assertEqual(str(pulse.JobTimedOut(d.SECOND, ValueError("late"))), "timed out after 1s: late")


class ResultTest(unittest.TestCase):
    def test_results_are_json_within_the_limit(self):
        job = pulse.Job(id="j", attempt=1, topic="t", args=b"{}")
        job.set_result({"a": [1, 2]})
        self.assertEqual(job.result, b'{"a":[1,2]}')
        job.set_result(b' {"kept": "as is"} ')
        self.assertEqual(job.result, b' {"kept": "as is"} ')
        job.set_result(None)
        self.assertEqual(job.result, b"null")
        for bad, what in [(b"{not json", "not valid JSON"), (b'"\xff"', "not valid JSON"),
                          ({"x": object()}, "encode result"), (float("nan"), "encode result"),
                          ("x" * (1 << 20), "the limit is 1048576")]:
            with self.subTest(what=what):
                with self.assertRaisesRegex(ValueError, what):
                    job.set_result(bad)


class ConnectionOptionsTest(unittest.TestCase):
    def test_loopback_targets(self):
        for t in ["localhost:50051", "127.0.0.1:1", "[::1]:50052", "dns:///localhost:1", "dns://8.8.8.8/localhost:1",
                  "ipv4:127.0.0.1:1,127.0.0.2:2", "unix:///tmp/s", "passthrough:///127.0.0.1:5", "LOCALHOST"]:
            self.assertTrue(pulse.loopback_target(t), t)
        for t in ["example.com:50051", "10.0.0.1:1", "dns:///gw:50052", "ipv4:127.0.0.1:1,10.0.0.1:2",
                  "localhost:http", "[::1]x", "dns://x"]:
            self.assertFalse(pulse.loopback_target(t), t)

    def test_credentials_beyond_loopback_need_tls_or_consent(self):
        with self.assertRaises(pulse.PlaintextCredentialsError):
            pulse.Client("gw.example:50051", user="u", password="p")
        with self.assertRaises(pulse.PlaintextCredentialsError):
            pulse.Worker(["127.0.0.1:1", "gw.example:50052"], token="t")
        with self.assertRaises(pulse.PlaintextCredentialsError):
            pulse.Worker(["gw.example:50052"], metadata=[("Authorization", "Bearer t")])
        pulse.Worker(["gw.example:50052"], user="u", password="p", allow_plaintext_credentials=True)
        pulse.Worker(["gw.example:50052"])  # no credentials: nothing to leak
        pulse.Worker(["localhost:50052"], user="u", password="p")

    def test_tls_files_are_read_at_construction(self):
        with self.assertRaisesRegex(pulse.ConfigError, "TLS CA file"):
            pulse.Client("gw.example:1", tls=pulse.TLS(ca_file="/nonexistent/ca.pem"))
        with self.assertRaisesRegex(pulse.ConfigError, "both the certificate file and the key file"):
            pulse.Client("gw.example:1", tls=pulse.TLS(cert_pem=b"x"))
        with self.assertRaisesRegex(pulse.ConfigError, "no PEM certificate"):
            pulse.Client("gw.example:1", tls=pulse.TLS(ca_pem=b"not a certificate"))

    def test_worker_options(self):
        for kw, what in [
            (dict(concurrency=0), "concurrency"), (dict(concurrency=1.5), "concurrency"),
            (dict(max_report_batch=0), "max report batch"), (dict(shutdown_timeout=-1), "shutdown timeout"),
            (dict(settle_behind=-1), "settle-behind"), (dict(worker_id=""), "worker id"),
            (dict(worker_id="w" * 201), "worker id"), (dict(colour="blue"), "unknown option"),
            (dict(user="u", token="t"), "not both"), (dict(password="p"), "without a user"),
        ]:
            with self.subTest(what=what, kw=kw):
                with self.assertRaisesRegex(pulse.ConfigError, what):
                    pulse.Worker(["localhost:1"], **kw)
        with self.assertRaisesRegex(pulse.ConfigError, "not a str"):
            pulse.Worker("localhost:1")
        with self.assertRaisesRegex(pulse.ConfigError, "at least one"):
            pulse.Worker([])

    def test_register(self):
        w = pulse.Worker(["localhost:1"])

        async def h(job):
            pass

        w.register("a", h, timeout=30)
        with self.assertRaisesRegex(pulse.ConfigError, "registered twice"):
            w.register("a", h)
        with self.assertRaisesRegex(pulse.ConfigError, "timeout"):
            w.register("b", h, timeout=0.5)
        with self.assertRaisesRegex(pulse.ConfigError, "topic"):
            w.register("b c", h)
        with self.assertRaisesRegex(pulse.ConfigError, "not callable"):
            w.register("b", None)


class PackagingTest(unittest.TestCase):
    def test_version_is_the_modules_version(self):
        repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
        want = subprocess.run(
            [os.path.join(repo, "scripts", "modversion.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
        self.assertEqual("v" + pulse.__version__, want)
        with open(os.path.join(repo, "sdk", "python", "pyproject.toml")) as f:
            self.assertIn(f'version = "{pulse.__version__}"', f.read())

    def test_installs_from_the_repository_folder(self):
        # As the README says: a venv that sees Debian's grpcio and protobuf,
        # pip installing the folder offline; then the package imports from
        # anywhere with its generated code.
        import shutil
        import sys
        import tempfile

        here = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(here, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
            venv = os.path.join(tmp, "venv")
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
            py = os.path.join(venv, "bin", "python")
            out = subprocess.run(
                [py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", src],
                capture_output=True, text=True,
            )
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            got = subprocess.run(
                [py, "-c", "import pulsequeue, pulsequeue.pb.pulse.v1.dispatch_pb2; print(pulsequeue.__version__, pulsequeue.__file__)"],
                capture_output=True, text=True, cwd=tmp, check=True,
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            ).stdout.split()
            self.assertEqual(got[0], pulse.__version__)
            self.assertTrue(got[1].startswith(venv), got[1])


if __name__ == "__main__":
    unittest.main()
