"""The SDK against a real fleet (tests/fleet.py): the producer's every
option as stored, and the worker's protocol — slots, results exactly once,
Permanent, RetryAfter, timeouts, cancellation, quiesce at a checkpoint,
graceful drain, refusal, adversarial errors."""

from __future__ import annotations

import asyncio
import datetime
import unittest
import uuid

import pulsequeue as pulse

from . import fleet as fleetmod
from .fleet import eventually


def tearDownModule():
    fleetmod.stop()


class FleetCase(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        fleetmod.fleet()  # outside the event loop: starting it blocks

    async def asyncSetUp(self):
        self.fleet = fleetmod.fleet()
        self.client = pulse.Client(self.fleet.control, **self.fleet.conn("producer"))
        self.operator = pulse.Client(self.fleet.control, **self.fleet.conn("operator"))
        self.topic = "py.test." + uuid.uuid4().hex[:12]
        self.workers: list[tuple[pulse.Worker, asyncio.Task]] = []

    async def asyncTearDown(self):
        for w, t in self.workers:
            w.stop()
        for w, t in self.workers:
            try:
                await asyncio.wait_for(t, fleetmod.PATIENCE)
            except Exception:
                pass
        await self.client.close()
        await self.operator.close()

    def worker(self, handlers: dict, **kw) -> tuple[pulse.Worker, list]:
        opts = dict(concurrency=4, handle_signals=False, shutdown_timeout=fleetmod.PATIENCE)
        opts.update(self.fleet.conn("worker"))
        opts.update(kw)
        w = pulse.Worker(self.fleet.gateways, **opts)
        events: list = []
        w.observer = lambda e, f: events.append((e, f))
        for topic, h in handlers.items():
            w.register(topic, h)
        self.workers.append((w, asyncio.create_task(w.run())))
        return w, events

    async def status(self, job_id: str, *want: str) -> pulse.JobInfo:
        async def check():
            j = await self.client.get(job_id)
            return j if j.status in want else None

        return await eventually(f"job {job_id} to be {'/'.join(want)}", check)


class ProducerTest(FleetCase):
    async def test_options_are_stored_as_given(self):
        run_at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
        s = await self.client.enqueue(
            self.topic,
            {"n": 12345678901234567890},
            priority=9,
            max_attempts=7,
            run_at=run_at,
            idempotency_key="k-" + self.topic,
            timeout=90,
            backoff=pulse.FixedBackoff(datetime.timedelta(seconds=30)),
        )
        self.assertFalse(s.duplicate)
        j = await self.client.get(s.id)
        self.assertEqual((j.topic, j.priority, j.max_attempts, j.status), (self.topic, 9, 7, "PENDING"))
        self.assertEqual(j.json(), {"n": 12345678901234567890})
        self.assertEqual(j.idempotency_key, "k-" + self.topic)
        self.assertEqual(j.timeout, 90)
        self.assertEqual(j.backoff, pulse.FixedBackoff(30))
        self.assertEqual(abs(j.next_run_at - run_at) < datetime.timedelta(milliseconds=1), True)
        again = await self.client.enqueue(self.topic, {}, idempotency_key="k-" + self.topic)
        self.assertEqual((again.id, again.duplicate), (s.id, True))
        u1 = await self.client.enqueue(self.topic, {"b": 1, "a": 2}, unique_for=3600, delay=3600)
        u2 = await self.client.enqueue(self.topic, b'{"a": 2, "b": 1}', unique_for=3600, delay=3600)
        self.assertEqual((u2.id, u2.duplicate), (u1.id, True))
        canceled = await self.operator.cancel(s.id)
        self.assertEqual(canceled.status, "CANCELED")

    async def test_tags_label_jobs_for_listings(self):
        tag = "run=" + self.topic[-12:]
        a = await self.client.enqueue(self.topic, {}, delay=3600, tags=[tag, "tenant=acme", tag])
        await self.client.enqueue(self.topic, {}, delay=3600, tags=["tenant=other"])
        jobs, _ = await self.client.list(tag=tag)
        self.assertEqual([j.id for j in jobs], [a.id])
        self.assertEqual((await self.client.get(a.id)).tags, tuple(sorted([tag, "tenant=acme"])))

    async def test_batch_is_all_or_nothing_and_passes_interceptors(self):
        seen = []

        async def stamp(req, nxt):
            seen.append(req.topic)
            req.priority = 3
            return await nxt(req)

        async with pulse.Client(self.fleet.control, interceptors=[stamp], **self.fleet.conn("producer")) as c:
            subs = await c.enqueue_many([pulse.JobRequest(self.topic, {"i": i}, delay=3600) for i in range(5)])
            self.assertEqual(len(set(s.id for s in subs)), 5)
            self.assertEqual(seen, [self.topic] * 5)
            self.assertEqual((await c.get(subs[2].id)).priority, 3)
            with self.assertRaises(pulse.ConfigError) as cm:
                await c.enqueue_many([pulse.JobRequest(self.topic), pulse.JobRequest(self.topic, max_attempts=999)])
            self.assertIn("job 1", str(cm.exception))

    def test_a_client_built_before_the_event_loop_works_inside_it(self):
        client = pulse.Client(self.fleet.control, **self.fleet.conn("producer"))  # at import time, say

        async def use():
            try:
                return await client.enqueue(self.topic, {}, delay=3600)
            finally:
                await client.close()

        self.assertFalse(asyncio.run(use()).duplicate)

    async def test_server_refusals_are_grpc_errors(self):
        import grpc

        with self.assertRaises(grpc.aio.AioRpcError) as cm:
            await self.client.get(str(uuid.uuid4()))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
        async with pulse.Client(self.fleet.control, user="producer", password="wrong") as bad:
            with self.assertRaises(grpc.aio.AioRpcError) as cm:
                await bad.enqueue(self.topic)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAUTHENTICATED)


class WorkerTest(FleetCase):
    async def test_runs_every_job_once_within_its_slots(self):
        n, concurrency = 40, 3
        running = peak = 0
        done: dict[str, int] = {}
        gate = asyncio.Event()

        async def h(job):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            try:
                if running == concurrency:
                    gate.set()
                await asyncio.sleep(0)
                await gate.wait()  # the first jobs wait until the slots are full
                done[job.id] = done.get(job.id, 0) + 1
            finally:
                running -= 1

        subs = await self.client.enqueue_many([pulse.JobRequest(self.topic, {"i": i}) for i in range(n)])
        _, events = self.worker({self.topic: h}, concurrency=concurrency, settle_behind=0)
        await eventually("every job to complete", lambda: len(done) == n)
        for s in subs:
            await self.status(s.id, "COMPLETED")
        self.assertEqual(peak, concurrency)
        self.assertEqual(set(done.values()), {1})
        held = max(f["held"] for e, f in events if e == "assigned")
        self.assertLessEqual(held, concurrency)  # settle_behind=0: never more leases than slots
        reported = [f for e, f in events if e == "reported"]
        self.assertEqual(len(reported), n)
        self.assertTrue(all(r["accepted"] for r in reported))

    async def test_failures_permanent_retry_after_and_hostile_error_text(self):
        async def h(job):
            kind = job.json()["kind"]
            if kind == "permanent":
                raise pulse.Permanent(ValueError("bad\x00args \udcff" + "é" * 5000))
            if kind == "retry_after":
                raise pulse.RetryAfter(datetime.timedelta(hours=1), RuntimeError("rate limited"))
            if kind == "fail":
                raise RuntimeError("boom")
            if kind == "panic":
                raise SystemError("deep trouble")

        jobs = {k: await self.client.enqueue(self.topic, {"kind": k}, max_attempts=3) for k in
                ["permanent", "retry_after", "fail", "ok"]}
        self.worker({self.topic: h})
        dead = await self.status(jobs["permanent"].id, "DEAD_LETTERED")
        self.assertEqual(dead.attempts, 1)
        err = dead.errors[0].error
        self.assertTrue(err.startswith("bad\ufffdargs \ufffd"), err[:20])
        self.assertTrue(err.endswith("…[truncated]"))
        self.assertLessEqual(len(err.encode()), 4096)
        ra = await self.status(jobs["retry_after"].id, "RETRYING")
        self.assertEqual(ra.errors[0].error, "rate limited")
        self.assertGreaterEqual(ra.next_run_at - ra.errors[0].at, datetime.timedelta(minutes=59))
        failed = await eventually(
            "the failing job's first error", lambda: self._errors(jobs["fail"].id)
        )
        self.assertEqual(failed[0].error, "boom")
        await self.status(jobs["ok"].id, "COMPLETED")

    async def test_snooze_puts_the_job_back_without_spending_an_attempt(self):
        async def h(job):
            if job.attempt == 1:
                raise pulse.Snooze(0)
            if job.attempt == 2:
                raise pulse.Snooze(datetime.timedelta(hours=1))

        s = await self.client.enqueue(self.topic, {}, max_attempts=1)
        self.worker({self.topic: h})
        j = await eventually("two snoozes", lambda: self._snoozed(s.id, 2))
        self.assertEqual((j.status, j.attempts, j.errors), ("PENDING", 2, ()))
        self.assertGreaterEqual(j.next_run_at - datetime.datetime.now(datetime.timezone.utc),
                                datetime.timedelta(minutes=59))

    async def _snoozed(self, job_id, n):
        j = await self.client.get(job_id)
        return j if j.snoozes >= n else None

    async def _errors(self, job_id):
        return (await self.client.get(job_id)).errors

    async def test_timeout_cancels_the_handler_and_fails_the_attempt(self):
        cancelled = asyncio.Event()

        async def h(job):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.assertIsInstance(job.stop_cause, pulse.JobTimedOut)
                cancelled.set()
                raise

        s = await self.client.enqueue(self.topic, {}, timeout=1, max_attempts=1)
        self.worker({self.topic: h})
        j = await self.status(s.id, "DEAD_LETTERED")
        self.assertEqual(j.errors[0].error, "timed out after 1s")
        self.assertTrue(cancelled.is_set())

    async def test_trace_context_reaches_the_handler(self):
        trace_id = uuid.uuid4().hex
        seen = []

        async def h(job):
            seen.append((job.traceparent, job.deadline is not None and job.deadline > 0))

        s = await self.client.enqueue(self.topic, {}, timeout=30, traceparent=f"00-{trace_id}-{'a1' * 8}-01")
        self.worker({self.topic: h})
        await self.status(s.id, "COMPLETED")
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0][0].split("-")[1], trace_id, seen[0][0])
        self.assertTrue(seen[0][1], "the handler sees its deadline")
        self.assertEqual((await self.client.get(s.id)).traceparent.split("-")[1], trace_id)
        with self.assertRaisesRegex(pulse.ConfigError, "traceparent"):
            await self.client.enqueue(self.topic, {}, traceparent="00-\n")

    async def test_topic_timeout_and_a_handler_that_ignores_cancellation(self):
        release = asyncio.Event()
        returned = asyncio.Event()

        async def stubborn(job):
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    pass  # ignores it: the attempt fails anyway, the slot waits
            returned.set()

        w = pulse.Worker(self.fleet.gateways, concurrency=1, handle_signals=False, **self.fleet.conn("worker"))
        events = []
        w.observer = lambda e, f: events.append((e, f))
        w.register(self.topic, stubborn, timeout=1)
        self.workers.append((w, asyncio.create_task(w.run())))
        first = await self.client.enqueue(self.topic, {}, max_attempts=1)
        second = await self.client.enqueue(self.topic, {}, max_attempts=1)
        j = await self.status(first.id, "DEAD_LETTERED")
        self.assertEqual(j.errors[0].error, "timed out after 1s")
        # One slot, still taken by the stubborn handler: the second job waits.
        self.assertFalse(any(e == "assigned" and f["job_id"] == second.id for e, f in events))
        release.set()
        await self.status(second.id, "COMPLETED")
        self.assertTrue(returned.is_set())

    async def test_cancel_reaches_the_handler_and_its_report_is_refused(self):
        started = asyncio.Event()
        causes = []

        async def h(job):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                causes.append(job.stop_cause)
                raise

        s = await self.client.enqueue(self.topic, {})
        _, events = self.worker({self.topic: h})
        await asyncio.wait_for(started.wait(), fleetmod.PATIENCE)
        await self.operator.cancel(s.id)
        await eventually("the handler to be cancelled", lambda: causes)
        self.assertIsInstance(causes[0], pulse.JobCanceled)
        rep = await eventually(
            "the refused report", lambda: [f for e, f in events if e == "reported" and f["job_id"] == s.id]
        )
        self.assertFalse(rep[0]["accepted"])
        self.assertEqual((await self.client.get(s.id)).status, "CANCELED")

    async def test_quiesce_holds_at_a_checkpoint_until_resume(self):
        passed = asyncio.Event()
        at_checkpoint = asyncio.Event()
        go = asyncio.Event()

        async def h(job):
            await go.wait()
            at_checkpoint.set()
            await job.safe_point()
            passed.set()

        s = await self.client.enqueue(self.topic, {})
        _, events = self.worker({self.topic: h})
        await eventually("the job to start", lambda: any(e == "started" for e, _ in events))
        with self.assertRaisesRegex(pulse.ConfigError, "not both"):
            await self.operator.pause_dispatch("x", topic=self.topic, pause_for=60,
                                               until=datetime.datetime.now(datetime.timezone.utc))
        with self.assertRaisesRegex(pulse.ConfigError, "until must be timezone-aware"):
            await self.operator.pause_dispatch("x", topic=self.topic, until=datetime.datetime.now())
        await self.operator.pause_dispatch("python sdk test", mode="quiesce", topic=self.topic,
                                           until=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
        try:
            scopes = {sc.scope: sc for sc in await self.operator.dispatch_status()}
            self.assertEqual((scopes[self.topic].paused, scopes[self.topic].mode), (True, "quiesce"))
            await eventually(
                "the worker to learn of the quiesce",
                lambda: any(e == "dispatch_state" and self.topic in f["quiesced"] for e, f in events),
            )
            go.set()
            await asyncio.wait_for(at_checkpoint.wait(), fleetmod.PATIENCE)
            # Held: renewals keep coming while the checkpoint waits.
            renewals = sum(1 for e, f in events if e == "renewed" and f["job_id"] == s.id)
            await eventually(
                "two more lease renewals while held",
                lambda: sum(1 for e, f in events if e == "renewed" and f["job_id"] == s.id) >= renewals + 2,
            )
            self.assertFalse(passed.is_set())
        finally:
            await self.operator.resume_dispatch(self.topic)
        await asyncio.wait_for(passed.wait(), fleetmod.PATIENCE)
        await self.status(s.id, "COMPLETED")

    async def test_stop_drains_what_was_claimed(self):
        n = 6
        release = asyncio.Event()
        started = []

        async def h(job):
            started.append(job.id)
            await release.wait()

        subs = await self.client.enqueue_many([pulse.JobRequest(self.topic, {"i": i}) for i in range(n)])
        w, events = self.worker({self.topic: h}, concurrency=n)
        task = self.workers[-1][1]
        await eventually("every job to start", lambda: len(started) == n)
        w.stop()
        await eventually("the half-close", lambda: any(e == "half_closed" for e, _ in events))
        self.assertFalse(task.done())  # still running the claimed jobs
        release.set()
        await asyncio.wait_for(task, fleetmod.PATIENCE)
        for s in subs:
            self.assertEqual((await self.client.get(s.id)).status, "COMPLETED")

    async def test_refused_credentials_stop_run(self):
        w = pulse.Worker(self.fleet.gateways, user="worker", password="wrong", handle_signals=False)

        async def h(job):
            pass

        w.register(self.topic, h)
        with self.assertRaises(pulse.WorkerRefused) as cm:
            await asyncio.wait_for(w.run(), fleetmod.PATIENCE)
        self.assertIn("UNAUTHENTICATED", str(cm.exception))

    async def test_sync_handlers_run_in_threads(self):
        import threading

        threads = set()

        def h(job):
            threads.add(threading.current_thread().name)
            if job.json()["fail"]:
                raise pulse.Permanent("sync says no")

        ok = await self.client.enqueue(self.topic, {"fail": False})
        bad = await self.client.enqueue(self.topic, {"fail": True})
        self.worker({self.topic: h})
        await self.status(ok.id, "COMPLETED")
        j = await self.status(bad.id, "DEAD_LETTERED")
        self.assertEqual(j.errors[0].error, "sync says no")
        self.assertTrue(all(t.startswith("pulse-handler") for t in threads))

    async def test_middleware_wraps_every_handler(self):
        order = []

        async def outer(job, nxt):
            order.append("outer")
            await nxt(job)

        async def inner(job, nxt):
            order.append("inner")
            try:
                await nxt(job)
            except KeyError as e:
                raise pulse.Permanent(e) from e

        async def h(job):
            order.append("handler")
            raise KeyError("missing")

        s = await self.client.enqueue(self.topic, {})
        w = pulse.Worker(self.fleet.gateways, handle_signals=False, **self.fleet.conn("worker"))
        w.use(outer, inner)
        w.register(self.topic, h)
        self.workers.append((w, asyncio.create_task(w.run())))
        await self.status(s.id, "DEAD_LETTERED")
        self.assertEqual(order, ["outer", "inner", "handler"])


class ResultsTest(FleetCase):
    async def test_a_handler_returns_a_result_and_a_caller_waits_for_it(self):
        async def h(job):
            a = job.json()
            if a.get("set"):
                job.set_result(b'{"via": "set_result"}')
                return None
            if a.get("unencodable"):
                return {"x": object()}
            return {"sum": a["x"] + a["y"], "big": 12345678901234567890}

        self.worker({self.topic: h})
        j = await self.client.enqueue_and_wait(self.topic, {"x": 1, "y": 2}, timeout=fleetmod.PATIENCE)
        self.assertEqual((j.status, j.result_json()), ("COMPLETED", {"sum": 3, "big": 12345678901234567890}))
        s = await self.client.enqueue(self.topic, {"set": True})
        j = await self.client.wait(s.id, timeout=fleetmod.PATIENCE)
        self.assertEqual(j.result_json(), {"via": "set_result"})
        self.assertEqual((await self.client.get(s.id)).result_json(), {"via": "set_result"})
        bad = await self.client.enqueue_and_wait(self.topic, {"unencodable": True}, timeout=fleetmod.PATIENCE)
        self.assertEqual(bad.status, "DEAD_LETTERED")
        self.assertIn("encode result", bad.errors[0].error)

    async def test_wait_gives_up_at_its_timeout(self):
        s = await self.client.enqueue(self.topic, {}, delay=3600)
        with self.assertRaises(asyncio.TimeoutError):
            await self.client.wait(s.id, timeout=0.5)
        self.assertEqual((await self.client.get(s.id)).status, "PENDING")


class ProgressTest(FleetCase):
    async def test_progress_and_metadata_are_stored_while_the_lease_is_held(self):
        reported = asyncio.Event()
        finish = asyncio.Event()
        after = []

        async def h(job):
            await job.set_progress(40)
            await job.set_metadata({"stage": "fetch", "n": 1})
            await job.set_metadata({"n": 2})
            with self.assertRaises(pulse.ConfigError):
                await job.set_progress(101)
            reported.set()
            await finish.wait()

        s = await self.client.enqueue(self.topic, {})
        w, _ = self.worker({self.topic: h})
        await asyncio.wait_for(reported.wait(), fleetmod.PATIENCE)
        j = await self.client.get(s.id)
        self.assertEqual((j.status, j.progress, j.metadata_json()), ("RUNNING", 40, {"stage": "fetch", "n": 2}))
        finish.set()
        await self.status(s.id, "COMPLETED")
        # Outside its handler a job has no lease to report under.
        job = pulse.Job(id=s.id, attempt=1, topic=self.topic, args=b"{}")
        with self.assertRaises(pulse.NotRunning):
            await job.set_progress(1)
        after.append((await self.client.get(s.id)).progress)
        self.assertEqual(after, [40])


class ReadmeTest(FleetCase):
    async def test_the_quick_start_runs_as_written(self):
        import os
        import re
        import signal
        import sys

        here = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
        with open(os.path.join(here, "README.md")) as f:
            block = re.search(r"## Quick start.*?```python\n(.*?)```", f.read(), re.S).group(1)
        self.assertLessEqual(len(block.strip().splitlines()), 14, "the quick start stays short")
        script = block.replace("<control-api grpc>", self.fleet.control).replace("<gateways grpc>", self.fleet.gateways[0])
        self.assertNotIn("<", script.replace("<-", ""), "every placeholder is filled")
        # As the README says: run from sdk/python with Debian's python3 (the
        # interpreter running these tests), the script on stdin.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-", cwd=here, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        proc.stdin.write(script.encode())
        proc.stdin.close()
        try:
            async def completed():
                jobs, _ = await self.client.list(topic="py.email.send", status="completed", limit=1)
                return jobs
            await eventually("the quick start's job to complete", completed)
            proc.send_signal(signal.SIGTERM)
            out, err = await asyncio.wait_for(proc.communicate(), fleetmod.PATIENCE)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        self.assertEqual(proc.returncode, 0, err.decode())
        self.assertIn("sending to a@example.com", out.decode())


if __name__ == "__main__":
    unittest.main()
