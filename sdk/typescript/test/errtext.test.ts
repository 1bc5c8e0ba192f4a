import { test } from "node:test";
import assert from "node:assert/strict";
import { sanitize, TRUNCATED_MARK, utf8Length } from "../src/errtext.js";

test("plain text is untouched", () => {
  assert.equal(sanitize("boom", 100), "boom");
});

test("NUL and lone surrogates become U+FFFD", () => {
  assert.equal(sanitize("a\u0000b", 100), "a\uFFFDb");
  assert.equal(sanitize("a\uD800b\uDC00", 100), "a\uFFFDb\uFFFD");
  assert.equal(sanitize("pair \uD83D\uDE00 kept", 100), "pair \uD83D\uDE00 kept");
});

test("long text is cut to the byte limit on a character boundary and marked", () => {
  const cut = sanitize("x".repeat(50), 20);
  assert.equal(cut, "x".repeat(20 - utf8Length(TRUNCATED_MARK)) + TRUNCATED_MARK);
  for (const ch of ["é", "€", "\uD83D\uDE00"]) {
    for (let limit = 20; limit < 40; limit++) {
      const s = sanitize(ch.repeat(30), limit);
      assert.ok(utf8Length(s) <= limit, `${ch} at ${limit}: ${utf8Length(s)} bytes`);
      assert.ok(s.endsWith(TRUNCATED_MARK));
      assert.equal(s, s.toWellFormed(), "no split character");
      assert.ok(!s.includes("\uFFFD"), "no replacement from a split");
    }
  }
});

test("a huge error is cut to 4096 bytes", () => {
  assert.equal(utf8Length(sanitize("x".repeat(5 << 20), 4096)), 4096);
});
