// Package schedule parses the three schedule kinds and computes their
// occurrences.
//
//   - at: one RFC 3339 instant ("2026-12-01T09:00:00Z"); fires once.
//   - every: a Go duration of at least MinEvery ("1s", "90s", "1h30m").
//     Occurrences sit on a grid anchored at the schedule's first occurrence
//     (creation time plus the interval), so they never drift.
//   - cron: a robfig/cron v3 expression, seconds field optional
//     ("*/5 * * * *", "0 30 9 * * MON-FRI"), or a descriptor (@hourly,
//     @daily, @weekly, @monthly, @yearly). It is read in TimeZone, an IANA
//     name loaded with time.LoadLocation ("UTC" when empty). @every is
//     rejected: use the every kind. An expression with no occurrence in the
//     next five years ("0 0 30 2 *", February 30th) is rejected: it would
//     never fire.
//
// DST (robfig/cron's rule, pinned by this package's tests): a local time
// skipped by a spring-forward transition does not occur that day (a daily
// 02:30 schedule has no occurrence on a day that jumps 02:00→03:00 and
// fires again at 02:30 the next day); a local time that repeats in a
// fall-back transition fires at both of its instants (a daily 01:30
// schedule fires at 01:30 EDT and again at 01:30 EST), since each is a
// distinct occurrence with its own job id.
//
// Missed occurrences (Latest): after downtime a schedule fires its latest
// missed occurrence once, not a burst of every missed one; its cursor then
// moves to the next occurrence after now.
package schedule

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Kinds of schedule, as stored in schedules.kind.
const (
	KindAt    = "at"
	KindEvery = "every"
	KindCron  = "cron"
)

// MinEvery is the shortest interval an every schedule may have.
const MinEvery = time.Second

// cronHorizonYears is how far ahead robfig/cron looks for a cron
// expression's next occurrence; an expression with none in that span is
// refused.
const cronHorizonYears = 5

// Schedule computes occurrences.
type Schedule interface {
	// Next returns the first occurrence strictly after t, or the zero time
	// when there is none (an at schedule past its instant).
	Next(t time.Time) time.Time
	// First is the occurrence a new (or re-expressed) schedule starts at.
	First(now time.Time) time.Time
}

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse validates kind, expression and timeZone; errors are
// apierr.Invalid naming the field at fault ("kind", "expression",
// "time_zone").
func Parse(kind, expression, timeZone string) (Schedule, error) {
	expression = strings.TrimSpace(expression)
	if expression == "" {
		return nil, apierr.Invalid("expression", "expression is required")
	}
	switch kind {
	case KindAt:
		if timeZone != "" && timeZone != "UTC" {
			if _, err := time.LoadLocation(timeZone); err != nil {
				return nil, apierr.Invalid("time_zone", "unknown time zone %q", timeZone)
			}
		}
		t, err := time.Parse(time.RFC3339Nano, expression)
		if err != nil {
			return nil, apierr.Invalid("expression", "an at schedule takes an RFC 3339 time such as 2026-12-01T09:00:00Z: %v", err)
		}
		return at{t: t}, nil
	case KindEvery:
		d, err := time.ParseDuration(expression)
		if err != nil {
			return nil, apierr.Invalid("expression", "an every schedule takes a duration such as 30s or 1h: %v", err)
		}
		if d < MinEvery {
			return nil, apierr.Invalid("expression", "interval %s is below the minimum of %s", d, MinEvery)
		}
		return Every{D: d}, nil
	case KindCron:
		loc := time.UTC
		if timeZone != "" {
			l, err := time.LoadLocation(timeZone)
			if err != nil {
				return nil, apierr.Invalid("time_zone", "unknown time zone %q", timeZone)
			}
			loc = l
		}
		if strings.HasPrefix(expression, "@every") {
			return nil, apierr.Invalid("expression", "@every is not a cron schedule; use kind every")
		}
		if strings.HasPrefix(expression, "CRON_TZ=") || strings.HasPrefix(expression, "TZ=") {
			return nil, apierr.Invalid("expression", "give the zone in time_zone, not in the expression")
		}
		s, err := parser.Parse(expression)
		if err != nil {
			return nil, apierr.Invalid("expression", "bad cron expression %q: %v", expression, err)
		}
		spec, ok := s.(*cron.SpecSchedule)
		if !ok {
			return nil, apierr.Invalid("expression", "unsupported cron expression %q", expression)
		}
		spec.Location = loc
		// A day that never comes ("0 0 30 2 *", February 30th) parses but
		// never fires: Next would answer the zero time, and a schedule
		// whose cursor is the zero time would fire at once, once.
		if spec.Next(time.Now()).IsZero() {
			return nil, apierr.Invalid("expression", "cron expression %q never fires: it has no occurrence in the next %d years", expression, cronHorizonYears)
		}
		return cronSchedule{spec: spec}, nil
	default:
		return nil, apierr.Invalid("kind", "kind %q is not one of at, every, cron", kind)
	}
}

// Latest returns the latest occurrence at or before now, starting from
// the cursor (itself an occurrence, at or before now), and the first
// occurrence after now (zero when none). It is the missed-fire policy:
// fire the latest missed occurrence once, then move past now.
func Latest(s Schedule, cursor, now time.Time) (occurrence, next time.Time) {
	if e, ok := s.(Every); ok {
		k := now.Sub(cursor) / e.D
		occurrence = cursor.Add(k * e.D)
		return occurrence, occurrence.Add(e.D)
	}
	occurrence = cursor
	for {
		n := s.Next(occurrence)
		if n.IsZero() || n.After(now) {
			return occurrence, n
		}
		occurrence = n
	}
}

type at struct{ t time.Time }

func (a at) Next(t time.Time) time.Time {
	if a.t.After(t) {
		return a.t
	}
	return time.Time{}
}

// First is the instant itself, even when it is already past: a late
// created at schedule fires at once.
func (a at) First(time.Time) time.Time { return a.t }

// Every is a fixed interval.
type Every struct{ D time.Duration }

// Next is t plus the interval.
func (e Every) Next(t time.Time) time.Time { return t.Add(e.D) }

// First is one interval from now (to the millisecond, which Postgres
// stores exactly).
func (e Every) First(now time.Time) time.Time { return now.Truncate(time.Millisecond).Add(e.D) }

type cronSchedule struct{ spec *cron.SpecSchedule }

func (c cronSchedule) Next(t time.Time) time.Time { return c.spec.Next(t).UTC() }

func (c cronSchedule) First(now time.Time) time.Time { return c.Next(now) }
