"""gRPC method handles for the services the SDK calls, written by hand from
proto/pulse/v1 (Debian ships no grpc_tools recent enough to generate
them): each is the channel's multi-callable for one RPC, with the
generated messages as its (de)serializers."""

from __future__ import annotations

import grpc

from .pb.pulse.v1 import control_pb2, dispatch_control_pb2, dispatch_pb2


def _unary(channel: grpc.aio.Channel, service: str, method: str, req, resp):
    return channel.unary_unary(
        f"/pulse.v1.{service}/{method}",
        request_serializer=req.SerializeToString,
        response_deserializer=resp.FromString,
    )


class DispatchStub:
    """pulse.v1.DispatchService (dispatch-gateway)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.StreamJobs = channel.stream_stream(
            "/pulse.v1.DispatchService/StreamJobs",
            request_serializer=dispatch_pb2.StreamJobsRequest.SerializeToString,
            response_deserializer=dispatch_pb2.StreamJobsResponse.FromString,
        )
        s = "DispatchService"
        self.Heartbeat = _unary(channel, s, "Heartbeat", dispatch_pb2.HeartbeatRequest, dispatch_pb2.HeartbeatResponse)
        self.ReportResult = _unary(
            channel, s, "ReportResult", dispatch_pb2.ReportResultRequest, dispatch_pb2.ReportResultResponse
        )
        self.UpdateProgress = _unary(
            channel, s, "UpdateProgress", dispatch_pb2.UpdateProgressRequest, dispatch_pb2.UpdateProgressResponse
        )


class ControlStub:
    """pulse.v1.ControlService and pulse.v1.DispatchControlService
    (control-api)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        s, c = "ControlService", control_pb2
        self.SubmitJob = _unary(channel, s, "SubmitJob", c.SubmitJobRequest, c.SubmitJobResponse)
        self.SubmitJobs = _unary(channel, s, "SubmitJobs", c.SubmitJobsRequest, c.SubmitJobsResponse)
        self.GetJob = _unary(channel, s, "GetJob", c.GetJobRequest, c.GetJobResponse)
        self.ListJobs = _unary(channel, s, "ListJobs", c.ListJobsRequest, c.ListJobsResponse)
        self.CancelJob = _unary(channel, s, "CancelJob", c.CancelJobRequest, c.CancelJobResponse)
        self.RetryJob = _unary(channel, s, "RetryJob", c.RetryJobRequest, c.RetryJobResponse)
        self.WaitJob = _unary(channel, s, "WaitJob", c.WaitJobRequest, c.WaitJobResponse)
        s, d = "DispatchControlService", dispatch_control_pb2
        self.GetDispatchState = _unary(channel, s, "GetDispatchState", d.GetDispatchStateRequest, d.GetDispatchStateResponse)
        self.PauseDispatch = _unary(channel, s, "PauseDispatch", d.PauseDispatchRequest, d.PauseDispatchResponse)
        self.ResumeDispatch = _unary(channel, s, "ResumeDispatch", d.ResumeDispatchRequest, d.ResumeDispatchResponse)
