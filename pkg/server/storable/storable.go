package storable

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Timestamps outside [MinTime, MaxTime] are refused: Postgres would store
// many of them, but no job is meant to run in year 1 or year 9999, and a
// value that far out is a client bug (a zero time, a seconds/millis mix-up).
var (
	MinTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Text refuses what a Postgres text column cannot hold: a NUL character or
// a byte sequence that is not UTF-8.
func Text(field, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return apierr.Invalid(field, "contains a NUL character at byte %d, which Postgres cannot store", i)
	}
	if !utf8.ValidString(s) {
		return apierr.Invalid(field, "is not valid UTF-8 (at byte %d)", firstInvalid(s))
	}
	return nil
}

// Time refuses a timestamp outside [MinTime, MaxTime].
func Time(field string, t time.Time) error {
	if t.Before(MinTime) || t.After(MaxTime) {
		return apierr.Invalid(field, "is %s; it must be between %s and %s",
			t.UTC().Format(time.RFC3339), MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339))
	}
	return nil
}

func firstInvalid(s string) int {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}
