import { create } from "@bufbuild/protobuf";
import { DurationSchema, TimestampSchema, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";

/** A protobuf Duration of ms milliseconds (whole microseconds). */
export function durationFromMs(ms: number): Duration {
  const micros = Math.round(ms * 1000);
  const seconds = Math.floor(micros / 1_000_000);
  return create(DurationSchema, { seconds: BigInt(seconds), nanos: (micros - seconds * 1_000_000) * 1000 });
}

/** Milliseconds of a protobuf Duration; undefined stays undefined. */
export function durationToMs(d: Duration | undefined): number | undefined {
  if (d === undefined) {
    return undefined;
  }
  return Number(d.seconds) * 1000 + d.nanos / 1e6;
}

export function timestampFromDate(d: Date): Timestamp {
  const ms = d.getTime();
  const seconds = Math.floor(ms / 1000);
  return create(TimestampSchema, { seconds: BigInt(seconds), nanos: (ms - seconds * 1000) * 1_000_000 });
}

export function timestampToDate(t: Timestamp | undefined): Date | undefined {
  if (t === undefined) {
    return undefined;
  }
  return new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6));
}
