// Package errtext makes a handler's error text storable in Postgres: error
// text is data, so a report carrying it must always be able to settle. The
// SDK applies it before sending and the gateway again on receipt.
package errtext

import (
	"strings"
	"unicode/utf8"
)

// TruncatedMark ends an error text that Sanitize cut short.
const TruncatedMark = "…[truncated]"

// Sanitize makes a handler's error text storable: NUL characters and
// invalid UTF-8 sequences become U+FFFD, and a text longer than maxBytes is
// cut at a rune boundary and ends with TruncatedMark (the result is at most
// maxBytes long). Error text is data: a report must always be able to
// settle, so it is repaired here, never refused.
func Sanitize(s string, maxBytes int) string {
	if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		var b strings.Builder
		b.Grow(len(s))
		for _, r := range s { // ranging yields RuneError for each invalid byte
			if r == 0 {
				r = utf8.RuneError
			}
			b.WriteRune(r)
		}
		s = b.String()
	}
	if maxBytes <= 0 || len(s) <= maxBytes {
		return s
	}
	keep := maxBytes - len(TruncatedMark)
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + TruncatedMark
}
