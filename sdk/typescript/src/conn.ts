/**
 * Connection options shared by the producer Client and the Worker:
 * transport security, credentials, and the gRPC calls themselves, made
 * with @grpc/grpc-js from the generated service descriptors.
 */
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { GenService } from "@bufbuild/protobuf/codegenv2";
import { PlaintextCredentialsError } from "./errors.js";

/** TLS for the connection. Without it the connection is plaintext. */
export interface TlsOptions {
  /** PEM CA bundle to trust (contents); undefined trusts the system's roots. */
  ca?: string | Buffer;
  /** Path of a PEM CA bundle, read at construction (alternative to ca). */
  caFile?: string;
  /** Client certificate and key (PEM contents), for services that require one. */
  cert?: string | Buffer;
  key?: string | Buffer;
  /** Paths of the client certificate and key (alternative to cert and key). */
  certFile?: string;
  keyFile?: string;
  /** Server name to verify instead of the target's host. */
  serverName?: string;
}

/** How to reach pulse's services. */
export interface ConnOptions {
  /** HTTP Basic credentials, sent on every call as the Go SDK's WithUserPass does. */
  user?: string;
  password?: string;
  /** Any other per-call metadata (e.g. a bearer token: {authorization: "Bearer …"}). */
  metadata?: Record<string, string>;
  /** TLS; true is the system's roots and no client certificate. */
  tls?: TlsOptions | true;
  /**
   * Lets credentials cross a plaintext connection to an address that is not
   * loopback, which is otherwise refused with PlaintextCredentialsError. Use
   * it only on a network you trust.
   */
  allowPlaintextCredentials?: boolean;
  /** Extra grpc-js channel options. */
  channelOptions?: grpc.ChannelOptions;
}

/** A connection to one service address. */
export class Conn {
  readonly client: grpc.Client;
  private readonly metadata: grpc.Metadata;

  constructor(
    readonly target: string,
    opts: ConnOptions,
  ) {
    const { creds, channelOptions } = channelCredentials(opts);
    this.client = new grpc.Client(target, creds, { ...channelOptions, ...opts.channelOptions });
    this.metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(callMetadata(opts))) {
      this.metadata.set(k, v);
    }
  }

  /** One unary call; deadlineMs bounds it, signal cancels it. */
  unary<I extends DescMessage, O extends DescMessage>(
    service: GenService<any>,
    method: string,
    input: I,
    output: O,
    request: MessageShape<I>,
    deadlineMs: number,
    signal?: AbortSignal,
  ): Promise<MessageShape<O>> {
    return new Promise((resolve, reject) => {
      const call = this.client.makeUnaryRequest(
        methodPath(service, method),
        (m: MessageShape<I>) => Buffer.from(toBinary(input, m)),
        (b: Buffer) => fromBinary(output, b),
        request,
        this.metadata.clone(),
        { deadline: Date.now() + deadlineMs },
        (err, res) => {
          signal?.removeEventListener("abort", onAbort);
          if (err) {
            reject(err);
          } else {
            resolve(res!);
          }
        },
      );
      const onAbort = () => call.cancel();
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** A bidirectional stream. */
  bidi<I extends DescMessage, O extends DescMessage>(
    service: GenService<any>,
    method: string,
    input: I,
    output: O,
  ): grpc.ClientDuplexStream<MessageShape<I>, MessageShape<O>> {
    return this.client.makeBidiStreamRequest(
      methodPath(service, method),
      (m: MessageShape<I>) => Buffer.from(toBinary(input, m)),
      (b: Buffer) => fromBinary(output, b),
      this.metadata.clone(),
      {},
    );
  }

  close(): void {
    this.client.close();
  }
}

function methodPath(service: GenService<any>, method: string): string {
  const m = service.method[method];
  if (!m) {
    throw new Error(`pulse: ${service.typeName} has no method ${method}`);
  }
  return `/${service.typeName}/${m.name}`;
}

function channelCredentials(opts: ConnOptions): { creds: grpc.ChannelCredentials; channelOptions: grpc.ChannelOptions } {
  if (!opts.tls) {
    return { creds: grpc.credentials.createInsecure(), channelOptions: {} };
  }
  const t: TlsOptions = opts.tls === true ? {} : opts.tls;
  const read = (what: string, file?: string, value?: string | Buffer): Buffer | null => {
    if (value !== undefined) {
      return Buffer.from(value);
    }
    if (file === undefined || file === "") {
      return null;
    }
    try {
      return readFileSync(file);
    } catch (err) {
      throw new Error(`pulse: read TLS ${what} file ${JSON.stringify(file)}: ${(err as Error).message}`);
    }
  };
  const ca = read("CA", t.caFile, t.ca);
  const cert = read("certificate", t.certFile, t.cert);
  const key = read("key", t.keyFile, t.key);
  if ((cert === null) !== (key === null)) {
    throw new Error("pulse: TLS client certificate and key go together: set both or neither");
  }
  const channelOptions: grpc.ChannelOptions = {};
  if (t.serverName) {
    channelOptions["grpc.ssl_target_name_override"] = t.serverName;
    channelOptions["grpc.default_authority"] = t.serverName;
  }
  return { creds: grpc.credentials.createSsl(ca, key, cert), channelOptions };
}

/** The metadata every call carries: basic auth and the caller's own. */
export function callMetadata(opts: ConnOptions): Record<string, string> {
  const md: Record<string, string> = { ...opts.metadata };
  if (opts.user !== undefined && opts.user !== "") {
    md["authorization"] = "Basic " + Buffer.from(`${opts.user}:${opts.password ?? ""}`).toString("base64");
  }
  return md;
}

/**
 * Refuses credentials over plaintext to a target that is not loopback,
 * unless allowPlaintextCredentials (the Go SDK's rule).
 */
export function checkConn(opts: ConnOptions, targets: string[]): void {
  channelCredentials(opts); // TLS files that cannot be read fail here, naming the file
  const hasCredentials = Object.keys(callMetadata(opts)).some((k) => k.toLowerCase() === "authorization");
  if (!hasCredentials || opts.tls || opts.allowPlaintextCredentials) {
    return;
  }
  for (const t of targets) {
    if (!loopbackTarget(t)) {
      throw new PlaintextCredentialsError(t);
    }
  }
}

/**
 * Whether a gRPC target names only this machine: a Unix socket, localhost
 * or loopback IPs, with or without the dns:, ipv4: or ipv6: scheme.
 */
export function loopbackTarget(target: string): boolean {
  let endpoints = target;
  const colon = target.indexOf(":");
  if (colon > 0) {
    const scheme = target.slice(0, colon).toLowerCase();
    const rest = target.slice(colon + 1);
    switch (scheme) {
      case "unix":
      case "unix-abstract":
        return true;
      case "dns":
      case "passthrough":
        endpoints = stripAuthority(rest);
        break;
      case "ipv4":
      case "ipv6":
        endpoints = rest;
        break;
    }
  }
  return endpoints.split(",").every(loopbackHost);
}

function stripAuthority(s: string): string {
  if (!s.startsWith("//")) {
    return s;
  }
  const rest = s.slice(2);
  const slash = rest.indexOf("/");
  return slash >= 0 ? rest.slice(slash + 1) : "";
}

function loopbackHost(endpoint: string): boolean {
  let host = endpoint;
  const m = /^(\[[^\]]*\]|[^:]*):([^:]*)$/.exec(endpoint);
  if (m) {
    if (!/^[0-9]*$/.test(m[2]!)) {
      return false;
    }
    host = m[1]!;
  }
  host = host.replace(/^\[/, "").replace(/\]$/, "");
  if (host.toLowerCase() === "localhost") {
    return true;
  }
  switch (isIP(host)) {
    case 4:
      return host.startsWith("127.");
    case 6:
      return host === "::1" || /^(0*:)*:?0*1$/.test(host) || host.toLowerCase().startsWith("::ffff:127.");
    default:
      return false;
  }
}

/** gRPC status codes the SDK acts on. */
export const Code = grpc.status;

/** The gRPC status code of an error, or UNKNOWN. */
export function statusCode(err: unknown): number {
  const code = (err as { code?: unknown })?.code;
  return typeof code === "number" ? code : grpc.status.UNKNOWN;
}
