"""The worker's side of the protocol against a gateway that misbehaves on
purpose (tests/fakegateway.py): copies of an attempt, more jobs than free
slots, no welcome, refusal, a lost lease, a broken stream. Every freed
slot must reach the gateway exactly once, as a credit or as the next
stream's in_flight."""

from __future__ import annotations

import asyncio
import unittest

import grpc

import pulsequeue as pulse
from pulsequeue.pb.pulse.v1 import dispatch_pb2 as pb

from .fakegateway import FakeGateway


class ProtocolTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.gw = await FakeGateway().start()
        self.runs: list[tuple[pulse.Worker, asyncio.Task]] = []

    async def asyncTearDown(self):
        for w, t in self.runs:
            w.stop()
        for w, t in self.runs:
            try:
                await asyncio.wait_for(t, 60)
            except Exception:
                pass
        await self.gw.stop()

    def run_worker(self, handler, targets=None, **kw) -> tuple[pulse.Worker, asyncio.Task]:
        opts = dict(concurrency=2, handle_signals=False, shutdown_timeout=60, worker_id="w-1")
        opts.update(kw)
        w = pulse.Worker(targets or [self.gw.target], **opts)
        w.register("t", handler)
        t = asyncio.create_task(w.run())
        self.runs.append((w, t))
        return w, t

    async def test_more_jobs_than_slots_wait_and_a_copy_runs_once(self):
        running = peak = 0
        ran: list[str] = []
        release = asyncio.Event()

        async def h(job):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            try:
                await release.wait()
                ran.append(job.id)
            finally:
                running -= 1

        self.run_worker(h, concurrency=2)
        await self.gw.wait("the open", lambda: self.gw.opens)
        self.assertEqual((self.gw.opens[0].concurrency, self.gw.opens[0].in_flight, list(self.gw.opens[0].topics)),
                         (2, 0, ["t"]))
        self.gw.send(("a", 1), ("b", 1), ("c", 1), ("a", 1))  # four for two slots, "a" twice
        # The copy of "a" is refused at once: its slot goes straight back.
        await self.gw.wait("the copy's credit", lambda: self.gw.credits == 1)
        release.set()
        await self.gw.wait("three results", lambda: len(self.gw.results) == 3)
        await self.gw.wait("every slot credited", lambda: self.gw.credits == 4)
        self.assertEqual(sorted(ran), ["a", "b", "c"])
        self.assertEqual(peak, 2)
        self.assertEqual([r.outcome for r in self.gw.results], [pb.OUTCOME_COMPLETE] * 3)

    async def test_results_travel_with_completions_and_batches_stay_bounded(self):
        big = "x" * (900 << 10)

        async def h(job):
            return {"id": job.id, "pad": big}

        self.run_worker(h, concurrency=4)
        await self.gw.wait("the open", lambda: self.gw.opens)
        self.gw.send(("r1", 1), ("r2", 1), ("r3", 1), ("r4", 1))
        await self.gw.wait("four results", lambda: len(self.gw.results) == 4)
        import json

        self.assertEqual(sorted(json.loads(r.result)["id"] for r in self.gw.results), ["r1", "r2", "r3", "r4"])
        # ~900 KiB each: no ReportResult carried more than 2 MiB of them
        # beyond its first (the batch cut).
        self.assertGreaterEqual(self.gw.report_calls, 2)
        self.assertEqual(self.gw.oversized, [])

    async def test_a_stream_without_a_welcome_is_left_and_reopened(self):
        self.gw.welcome = False
        self.run_worker(lambda job: None)
        await self.gw.wait("a second open", lambda: len(self.gw.opens) >= 2)
        self.gw.welcome = True
        await self.gw.wait("a third open", lambda: len(self.gw.opens) >= 3)
        self.gw.send(("x", 1))
        await self.gw.wait("its result", lambda: self.gw.results)

    async def test_stop_while_a_gateway_never_answers_ends_after_the_grace(self):
        self.gw.silent = True
        w, t = self.run_worker(lambda job: None)
        await self.gw.wait("the open", lambda: self.gw.opens)
        w.stop()
        await asyncio.wait_for(t, 60)  # the half-close grace (3 s), not forever
        self.assertEqual(len(self.gw.opens), 1)

    async def test_refusal_by_every_gateway_stops_run(self):
        other = await FakeGateway().start()
        try:
            self.gw.refuse = other.refuse = grpc.StatusCode.PERMISSION_DENIED
            w, t = self.run_worker(lambda job: None, targets=[self.gw.target, other.target])
            with self.assertRaises(pulse.WorkerRefused) as cm:
                await asyncio.wait_for(t, 60)
            self.assertIn("PERMISSION_DENIED", str(cm.exception))
            self.assertEqual((len(self.gw.opens), len(other.opens)), (1, 1))
        finally:
            await other.stop()

    async def test_a_lost_lease_stops_the_handler_and_the_report_still_goes(self):
        causes = []

        async def h(job):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                causes.append(job.stop_cause)
                raise

        self.run_worker(h)
        await self.gw.wait("the open", lambda: self.gw.opens)
        self.gw.lost.add(("j", 1))
        self.gw.send(("j", 1))
        await self.gw.wait("the report", lambda: self.gw.results)
        self.assertIsInstance(causes[0], pulse.LeaseLost)
        self.assertEqual(self.gw.results[0].outcome, pb.OUTCOME_FAIL)
        self.assertEqual(self.gw.results[0].error, "pulse: job lease lost")
        await self.gw.wait("its slot credited", lambda: self.gw.credits == 1)

    async def test_a_broken_stream_reopens_with_what_still_runs_in_flight(self):
        release = asyncio.Event()

        async def h(job):
            await release.wait()

        self.run_worker(h, concurrency=3)
        await self.gw.wait("the open", lambda: self.gw.opens)
        self.gw.send(("p", 1), ("q", 1))
        await self.gw.wait("both held", lambda: any(len(hb.jobs) == 2 for hb in self.gw.heartbeats))
        self.gw.end_stream(grpc.StatusCode.UNAVAILABLE)
        await self.gw.wait("the reopen", lambda: len(self.gw.opens) == 2)
        self.assertEqual(self.gw.opens[1].in_flight, 2)  # the new stream starts with one free slot
        release.set()
        await self.gw.wait("both results", lambda: len(self.gw.results) == 2)
        await self.gw.wait("both slots credited", lambda: self.gw.credits == 2)

    async def test_stop_half_closes_and_runs_what_arrives_meanwhile(self):
        started = asyncio.Event()
        release = asyncio.Event()

        async def h(job):
            started.set()
            await release.wait()

        w, t = self.run_worker(h)
        await self.gw.wait("the open", lambda: self.gw.opens)
        self.gw.send(("d", 1))
        await asyncio.wait_for(started.wait(), 60)
        w.stop()
        # The gateway ends the stream on the half-close; the running job
        # still finishes and is reported before run returns.
        await asyncio.sleep(0)
        self.assertFalse(t.done())
        release.set()
        await asyncio.wait_for(t, 60)
        self.assertEqual([(r.job_id, r.outcome) for r in self.gw.results], [("d", pb.OUTCOME_COMPLETE)])


    async def test_a_second_signal_stops_running_handlers_at_once(self):
        import signal

        started = asyncio.Event()
        causes = []

        async def h(job):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                causes.append(job.stop_cause)
                raise

        w, t = self.run_worker(h, shutdown_timeout=3600)
        await self.gw.wait("the open", lambda: self.gw.opens)
        self.gw.send(("s", 1))
        await asyncio.wait_for(started.wait(), 60)
        w._signalled(signal.SIGTERM)  # drain: the handler keeps running
        self.assertFalse(t.done())
        self.assertEqual(causes, [])
        w._signalled(signal.SIGINT)  # impatient: stop it now, not in an hour
        await asyncio.wait_for(t, 60)
        self.assertEqual([type(c) for c in causes], [pulse.WorkerShutdown])
        self.assertEqual([(r.job_id, r.error) for r in self.gw.results], [("s", "pulse: worker shutting down")])


if __name__ == "__main__":
    unittest.main()
