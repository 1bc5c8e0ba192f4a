"""An in-process dispatch-gateway that a test drives message by message, for
what a real fleet will not do on demand: send a copy of an attempt, more
jobs than free slots, a stream without a welcome, refuse the worker, or say
a lease is lost. It speaks the real protocol through grpc.aio."""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf import duration_pb2

from pulsequeue.pb.pulse.v1 import dispatch_pb2 as pb


class FakeGateway:
    def __init__(self) -> None:
        self.opens: list[pb.OpenStream] = []
        self.credits = 0
        self.results: list[pb.JobResult] = []
        self.report_calls = 0
        self.oversized: list[int] = []  # batches past the SDK's byte cut
        self.heartbeats: list[pb.HeartbeatRequest] = []
        self.changed = asyncio.Event()  # set whenever something arrives
        self.refuse: grpc.StatusCode | None = None
        self.welcome = True
        self.silent = False  # accept the stream and never say a word
        self.lost: set[tuple[str, int]] = set()  # heartbeats answer lease_held=False
        self.outbox: asyncio.Queue | None = None
        self.server: grpc.aio.Server | None = None
        self.target = ""

    async def start(self) -> "FakeGateway":
        h = grpc.method_handlers_generic_handler("pulse.v1.DispatchService", {
            "StreamJobs": grpc.stream_stream_rpc_method_handler(
                self._stream, pb.StreamJobsRequest.FromString, pb.StreamJobsResponse.SerializeToString),
            "Heartbeat": grpc.unary_unary_rpc_method_handler(
                self._heartbeat, pb.HeartbeatRequest.FromString, pb.HeartbeatResponse.SerializeToString),
            "ReportResult": grpc.unary_unary_rpc_method_handler(
                self._report, pb.ReportResultRequest.FromString, pb.ReportResultResponse.SerializeToString),
        })
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((h,))
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.target = f"127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)

    def _note(self) -> None:
        self.changed.set()

    async def wait(self, what: str, cond, patience: float = 60.0):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + patience
        while not cond():
            self.changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"fake gateway: timed out waiting for {what}")
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def send(self, *jobs: tuple[str, int], topic: str = "t", args: bytes = b"{}", timeout_s: int = 0) -> None:
        """Assigns attempts (job id, attempt) on the open stream."""
        msg = pb.StreamJobsResponse(assignments=pb.Assignments(jobs=[
            pb.Assignment(job_id=j, attempt=a, topic=topic, args=args, max_attempts=3,
                          timeout=duration_pb2.Duration(seconds=timeout_s) if timeout_s else None)
            for j, a in jobs
        ]))
        for a in msg.assignments.jobs:
            a.lease_until.GetCurrentTime()
            a.lease_until.seconds += 30
        assert self.outbox is not None, "no stream is open"
        self.outbox.put_nowait(msg)

    def end_stream(self, code: grpc.StatusCode | None = None) -> None:
        assert self.outbox is not None
        self.outbox.put_nowait(code or "ok")

    async def _stream(self, request_iterator, context):
        first = await context.read()
        self.opens.append(first.open)
        self._note()
        if self.refuse is not None:
            await context.abort(self.refuse, "refused by the fake gateway")
        outbox: asyncio.Queue = asyncio.Queue()
        self.outbox = outbox

        async def read():
            while True:
                m = await context.read()
                if m is grpc.aio.EOF:
                    outbox.put_nowait("ok")  # half-closed: end the stream
                    return
                self.credits += m.credit.slots
                self._note()

        reader = asyncio.create_task(read())
        try:
            if self.silent:
                await asyncio.Event().wait()
            if self.welcome:
                await context.write(pb.StreamJobsResponse(welcome=pb.Welcome(
                    gateway_id="fake", lease_ttl=duration_pb2.Duration(seconds=30),
                    heartbeat_interval=duration_pb2.Duration(nanos=200_000_000))))
            else:
                await context.write(pb.StreamJobsResponse(assignments=pb.Assignments()))
            while True:
                m = await outbox.get()
                if m == "ok":
                    return
                if isinstance(m, grpc.StatusCode):
                    await context.abort(m, "ended by the fake gateway")
                await context.write(m)
        finally:
            reader.cancel()

    async def _heartbeat(self, req, context):
        self.heartbeats.append(req)
        self._note()
        out = pb.HeartbeatResponse()
        for j in req.jobs:
            r = out.results.add(job_id=j.job_id, attempt=j.attempt, lease_held=(j.job_id, j.attempt) not in self.lost)
            if r.lease_held:
                r.lease_until.GetCurrentTime()
                r.lease_until.seconds += 30
        return out

    async def _report(self, req, context):
        self.report_calls += 1
        size = sum(len(r.result) + len(r.error) for r in req.results)
        if size > (2 << 20) and len(req.results) > 1:
            self.oversized.append(size)
        out = pb.ReportResultResponse()
        for r in req.results:
            self.results.append(r)
            lost = (r.job_id, r.attempt) in self.lost
            out.acks.add(job_id=r.job_id, attempt=r.attempt, code=9 if lost else 0,
                         message="lease lost" if lost else "")
        self._note()
        return out
