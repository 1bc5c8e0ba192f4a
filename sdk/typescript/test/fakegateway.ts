/**
 * An in-process dispatch-gateway for the worker's unit tests: a real
 * grpc-js server on a loopback port that records what the worker sends
 * and lets a test send assignments and shape heartbeat answers.
 */
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { DurationSchema, TimestampSchema } from "@bufbuild/protobuf/wkt";
import {
  AssignmentSchema,
  AssignmentsSchema,
  HeartbeatRequestSchema,
  HeartbeatResponseSchema,
  HeartbeatResultSchema,
  ReportResultRequestSchema,
  ReportResultResponseSchema,
  ResultAckSchema,
  StreamJobsRequestSchema,
  StreamJobsResponseSchema,
  WelcomeSchema,
  type HeartbeatRequest,
  type JobResult,
  type OpenStream,
  type StreamJobsRequest,
  type StreamJobsResponse,
} from "../src/gen/pulse/v1/dispatch_pb.js";

function method<I extends DescMessage, O extends DescMessage>(name: string, input: I, output: O, requestStream: boolean, responseStream: boolean) {
  return {
    path: `/pulse.v1.DispatchService/${name}`,
    requestStream,
    responseStream,
    requestSerialize: (m: MessageShape<I>) => Buffer.from(toBinary(input, m)),
    requestDeserialize: (b: Buffer) => fromBinary(input, b),
    responseSerialize: (m: MessageShape<O>) => Buffer.from(toBinary(output, m)),
    responseDeserialize: (b: Buffer) => fromBinary(output, b),
  };
}

const definition = {
  StreamJobs: method("StreamJobs", StreamJobsRequestSchema, StreamJobsResponseSchema, true, true),
  Heartbeat: method("Heartbeat", HeartbeatRequestSchema, HeartbeatResponseSchema, false, false),
  ReportResult: method("ReportResult", ReportResultRequestSchema, ReportResultResponseSchema, false, false),
} as unknown as grpc.ServiceDefinition;

type Stream = grpc.ServerDuplexStream<StreamJobsRequest, StreamJobsResponse>;

export class FakeGateway {
  readonly opens: OpenStream[] = [];
  /** Credits per message, in order. */
  readonly credits: number[] = [];
  readonly results: JobResult[] = [];
  readonly heartbeats: HeartbeatRequest[] = [];
  /** The authorization metadata of each stream the worker opened. */
  readonly authorizations: string[] = [];
  /** Streams the worker half-closed. */
  halfCloses = 0;
  /** Decides each heartbeat result; default: the lease is held. */
  answer: (jobId: string, attempt: number) => { leaseHeld?: boolean; canceled?: boolean; quiesced?: boolean } = () => ({ leaseHeld: true });
  /** When set, every stream is refused with this status code on open. */
  refuse?: grpc.status;
  address = "";
  private server = new grpc.Server();
  private streams: Stream[] = [];

  constructor(
    private readonly leaseTtlMs = 30_000,
    private readonly heartbeatMs = 10_000,
    /** Serve TLS with this certificate and key (PEM) instead of plaintext. */
    private readonly tls?: { cert: Buffer; key: Buffer },
  ) {}

  async start(): Promise<void> {
    this.server.addService(definition, {
      StreamJobs: (call: Stream) => this.stream(call),
      Heartbeat: (call: grpc.ServerUnaryCall<HeartbeatRequest, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        this.heartbeats.push(call.request);
        const until = create(TimestampSchema, { seconds: BigInt(Math.floor(Date.now() / 1000) + 30) });
        cb(null, create(HeartbeatResponseSchema, {
          results: call.request.jobs.map((j) => create(HeartbeatResultSchema, { jobId: j.jobId, attempt: j.attempt, leaseUntil: until, ...this.answer(j.jobId, j.attempt) })),
        }));
      },
      ReportResult: (call: grpc.ServerUnaryCall<{ results: JobResult[] }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        this.results.push(...call.request.results);
        cb(null, create(ReportResultResponseSchema, { acks: call.request.results.map((r) => create(ResultAckSchema, { jobId: r.jobId, attempt: r.attempt, code: 0 })) }));
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync("127.0.0.1:0",
        this.tls ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: this.tls.cert, private_key: this.tls.key }], false) : grpc.ServerCredentials.createInsecure(),
        (err, p) => (err ? reject(err) : resolve(p))));
    this.address = `127.0.0.1:${port}`;
  }

  private stream(call: Stream): void {
    let opened = false;
    this.authorizations.push(String(call.metadata.get("authorization")[0] ?? ""));
    call.on("data", (req: StreamJobsRequest) => {
      if (req.msg.case === "open" && this.refuse !== undefined) {
        this.opens.push(req.msg.value);
        call.emit("error", Object.assign(new Error("refused"), { code: this.refuse }));
        return;
      }
      if (req.msg.case === "open") {
        opened = true;
        this.opens.push(req.msg.value);
        this.streams.push(call);
        call.write(create(StreamJobsResponseSchema, {
          msg: {
            case: "welcome",
            value: create(WelcomeSchema, {
              gatewayId: "fake",
              leaseTtl: create(DurationSchema, { seconds: BigInt(Math.floor(this.leaseTtlMs / 1000)), nanos: (this.leaseTtlMs % 1000) * 1e6 }),
              heartbeatInterval: create(DurationSchema, { seconds: BigInt(Math.floor(this.heartbeatMs / 1000)), nanos: (this.heartbeatMs % 1000) * 1e6 }),
            }),
          },
        }));
      } else if (req.msg.case === "credit" && opened) {
        this.credits.push(req.msg.value.slots);
      }
    });
    call.on("end", () => {
      this.halfCloses++;
      this.streams = this.streams.filter((s) => s !== call);
      call.end(); // nothing claimed in flight: end the stream with OK
    });
    call.on("error", () => {
      this.streams = this.streams.filter((s) => s !== call);
    });
  }

  /** Sends assignments on the newest open stream. */
  assign(...jobs: { id: string; attempt?: number; topic?: string; args?: unknown; timeoutMs?: number }[]): void {
    const s = this.streams.at(-1);
    if (!s) {
      throw new Error("no open stream");
    }
    const until = create(TimestampSchema, { seconds: BigInt(Math.floor(Date.now() / 1000) + 30) });
    s.write(create(StreamJobsResponseSchema, {
      msg: {
        case: "assignments",
        value: create(AssignmentsSchema, {
          jobs: jobs.map((j) => create(AssignmentSchema, {
            jobId: j.id, attempt: j.attempt ?? 1, topic: j.topic ?? "t", maxAttempts: 3, leaseUntil: until,
            args: new TextEncoder().encode(JSON.stringify(j.args ?? {})),
            timeout: j.timeoutMs ? create(DurationSchema, { seconds: BigInt(Math.floor(j.timeoutMs / 1000)), nanos: (j.timeoutMs % 1000) * 1e6 }) : undefined,
          })),
        }),
      },
    }));
  }

  /** Breaks every open stream with UNAVAILABLE, as a dying gateway would. */
  breakStreams(): void {
    for (const s of this.streams) {
      s.emit("error", Object.assign(new Error("gateway going away"), { code: grpc.status.UNAVAILABLE }));
    }
    this.streams = [];
  }

  get openStreams(): number {
    return this.streams.length;
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.server.tryShutdown(() => resolve()));
  }

  forceStop(): void {
    this.server.forceShutdown();
  }
}

/** Polls cond until it holds, failing after the patience bound. */
export async function waitFor(what: string, cond: () => boolean, patienceMs = 10_000): Promise<void> {
  const deadline = Date.now() + patienceMs;
  while (!cond()) {
    if (Date.now() > deadline) {
      throw new Error(`gave up after ${patienceMs} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
