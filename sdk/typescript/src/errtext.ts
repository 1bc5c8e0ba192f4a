/**
 * Error text is data: a report carrying it must always settle. NUL and
 * unpaired surrogates (which cannot be UTF-8) become U+FFFD, and text
 * longer than the limit is cut on a character boundary and marked, as the
 * Go SDK's errtext.Sanitize does.
 */

/** Ends an error text that sanitize cut short. */
export const TRUNCATED_MARK = "…[truncated]";

const encoder = new TextEncoder();

/** Makes s storable: no NUL, valid UTF-8, at most maxBytes UTF-8 bytes. */
export function sanitize(s: string, maxBytes: number): string {
  // toWellFormed (Node 20) replaces lone surrogates with U+FFFD.
  let out = s.toWellFormed();
  if (out.includes("\u0000")) {
    out = out.replaceAll("\u0000", "\uFFFD");
  }
  if (maxBytes <= 0 || out.length * 3 <= maxBytes) {
    return out;
  }
  const bytes = encoder.encode(out);
  if (bytes.length <= maxBytes) {
    return out;
  }
  let keep = Math.max(0, maxBytes - encoder.encode(TRUNCATED_MARK).length);
  while (keep > 0 && (bytes[keep]! & 0xc0) === 0x80) {
    keep--; // never split a character: back up to its first byte
  }
  return new TextDecoder().decode(bytes.subarray(0, keep)) + TRUNCATED_MARK;
}

/** UTF-8 length of s. */
export function utf8Length(s: string): number {
  return encoder.encode(s).length;
}
