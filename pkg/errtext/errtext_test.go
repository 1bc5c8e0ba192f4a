package errtext_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pulsequeue/pulse/pkg/errtext"
)

func TestSanitize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		max      int
		want     string
	}{
		{"PlainTextIsUntouched", "boom", 100, "boom"},
		{"NULBecomesReplacement", "a\x00b", 100, "a\uFFFDb"},
		{"InvalidBytesBecomeReplacement", "a\xffb\xc3", 100, "a\uFFFDb\uFFFD"},
		{"LongTextIsCutAndMarked", strings.Repeat("x", 50), 20, strings.Repeat("x", 20-len(errtext.TruncatedMark)) + errtext.TruncatedMark},
		{"CutNeverSplitsARune", strings.Repeat("é", 30), 21, strings.Repeat("é", 3) + errtext.TruncatedMark},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := errtext.Sanitize(tc.in, tc.max)
			if got != tc.want {
				t.Fatalf("Sanitize(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
		})
	}
}

func FuzzSanitizeIsAlwaysStorable(f *testing.F) {
	f.Add("boom\x00\xff"+strings.Repeat("é", 40), 33)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit < 0 || limit > 1<<16 {
			return
		}
		got := errtext.Sanitize(s, limit)
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("Sanitize(%q) = %q is not storable", s, got)
		}
		if limit >= len(errtext.TruncatedMark) && len(got) > limit {
			t.Fatalf("Sanitize(%q, %d) is %d bytes", s, limit, len(got))
		}
	})
}
