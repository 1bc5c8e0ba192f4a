package schedule_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/schedule"
)

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ kind, expr, tz, field string }{
		{"cron", "61 * * * *", "", "expression"},
		{"cron", "* * *", "", "expression"},
		{"cron", "@every 5s", "", "expression"},
		{"cron", "0 9 * * *", "Mars/Olympus", "time_zone"},
		{"every", "500ms", "", "expression"},
		{"every", "soon", "", "expression"},
		{"at", "tomorrow", "", "expression"},
		{"hourly", "x", "", "kind"},
		{"cron", "", "", "expression"},
		{"cron", "0 0 30 2 *", "", "expression"},        // February 30th never comes
		{"cron", "0 0 31 4,6,9,11 *", "", "expression"}, // nor a 31st of these months
	} {
		_, err := schedule.Parse(tc.kind, tc.expr, tc.tz)
		require.Error(t, err, "%+v", tc)
		require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err), "%+v", tc)
		require.Equal(t, tc.field, apierr.FieldOf(err), "%+v: %v", tc, err)
	}
}

func TestCronSecondsOptionalAndDescriptors(t *testing.T) {
	base := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s, err := schedule.Parse("cron", "*/15 * * * *", "")
	require.NoError(t, err)
	require.Equal(t, base.Add(15*time.Minute), s.Next(base))
	s, err = schedule.Parse("cron", "*/10 * * * * *", "")
	require.NoError(t, err)
	require.Equal(t, base.Add(10*time.Second), s.Next(base))
	s, err = schedule.Parse("cron", "@hourly", "UTC")
	require.NoError(t, err)
	require.Equal(t, base.Add(time.Hour), s.Next(base))
}

func TestCronTimeZone(t *testing.T) {
	s, err := schedule.Parse("cron", "0 9 * * *", "Asia/Tokyo")
	require.NoError(t, err)
	got := s.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	require.Equal(t, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), got, "09:00 Tokyo is 00:00 UTC; Next is strictly after")
	got = s.Next(time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC))
	require.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), got)
}

// TestCronDST pins the documented rule: a skipped local time does not fire
// that day; a repeated one fires at each of its two instants.
func TestCronDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	// 2026-03-08: 02:00 EST jumps to 03:00 EDT.
	s, err := schedule.Parse("cron", "30 2 * * *", "America/New_York")
	require.NoError(t, err)
	got := s.Next(time.Date(2026, 3, 8, 0, 0, 0, 0, ny))
	require.Equal(t, time.Date(2026, 3, 9, 2, 30, 0, 0, ny).UTC(), got, "02:30 does not exist on 2026-03-08: that day has no occurrence")
	// An hourly schedule just has one fewer occurrence that day.
	h, err := schedule.Parse("cron", "0 * * * *", "America/New_York")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 8, 3, 0, 0, 0, ny).UTC(), h.Next(time.Date(2026, 3, 8, 1, 0, 0, 0, ny)))

	// 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice.
	s, err = schedule.Parse("cron", "30 1 * * *", "America/New_York")
	require.NoError(t, err)
	first := s.Next(time.Date(2026, 11, 1, 0, 0, 0, 0, ny))
	require.Equal(t, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), first, "the first 01:30 (EDT)")
	second := s.Next(first)
	require.Equal(t, time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC), second, "the repeated 01:30 (EST) fires too")
	require.Equal(t, time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC), s.Next(second))
}

func TestEveryAndLatest(t *testing.T) {
	s, err := schedule.Parse("every", "1s", "")
	require.NoError(t, err)
	c := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	occ, next := schedule.Latest(s, c, c.Add(10500*time.Millisecond))
	require.Equal(t, c.Add(10*time.Second), occ, "after downtime the latest missed occurrence fires, once")
	require.Equal(t, c.Add(11*time.Second), next)
	occ, next = schedule.Latest(s, c, c)
	require.Equal(t, c, occ)
	require.Equal(t, c.Add(time.Second), next)

	cs, err := schedule.Parse("cron", "@hourly", "")
	require.NoError(t, err)
	occ, next = schedule.Latest(cs, c, c.Add(5*time.Hour+time.Minute))
	require.Equal(t, c.Add(5*time.Hour), occ)
	require.Equal(t, c.Add(6*time.Hour), next)

	as, err := schedule.Parse("at", "2026-01-01T00:00:00Z", "")
	require.NoError(t, err)
	occ, next = schedule.Latest(as, as.First(c), c.Add(time.Hour))
	require.Equal(t, c, occ)
	require.True(t, next.IsZero(), "an at schedule fires once")
}

// A cron expression that never fires is refused rather than stored with a
// zero cursor (which would fire at once, once); one that fires rarely, on
// February 29th, is accepted.
func TestCronThatNeverFiresIsRefused(t *testing.T) {
	_, err := schedule.Parse("cron", "0 0 30 2 *", "Europe/Paris")
	require.ErrorContains(t, err, "never fires")
	s, err := schedule.Parse("cron", "0 0 29 2 *", "")
	require.NoError(t, err)
	require.False(t, s.First(time.Now()).IsZero())
}
