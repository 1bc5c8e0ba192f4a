package jobstore_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// rollup is one job_throughput row, written as the settling statements
// write them (until they do, tests write them directly).
type rollup struct {
	at                        time.Time
	topic, writer             string
	completed, failed, deaths int64
}

func insertRollups(t *testing.T, pool *pgxpool.Pool, rows ...rollup) {
	t.Helper()
	for _, r := range rows {
		_, err := pool.Exec(ctx, `INSERT INTO job_throughput (bucket, topic, writer, completed, failed, dead_lettered)
			VALUES ($1, $2, $3, $4, $5, $6)`, r.at, r.topic, r.writer, r.completed, r.failed, r.deaths)
		require.NoError(t, err)
	}
}

// counts is a point without its time: completed, failed, dead lettered.
type counts [3]int64

func countsOf(points []jobstore.ThroughputPoint) []counts {
	out := make([]counts, len(points))
	for i, p := range points {
		out[i] = counts{p.Completed, p.Failed, p.DeadLettered}
	}
	return out
}

func TestThroughput(t *testing.T) {
	t.Parallel()

	// A fixed end: the read is judged against the rows, never the clock.
	end := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(hhmm string) time.Time {
		tt, err := time.Parse("15:04", hhmm)
		require.NoError(t, err)
		return time.Date(2026, 11, 23, tt.Hour(), tt.Minute(), 0, 0, time.UTC)
	}
	seed := func(t *testing.T) *testBundle {
		b := setup(t)
		insertRollups(t, b.pool,
			rollup{at: at("11:50"), topic: "mail", writer: "gw-a", completed: 100},          // before a 5-minute window
			rollup{at: at("11:57"), topic: "mail", writer: "gw-a", completed: 3, failed: 1}, // two writers, one minute
			rollup{at: at("11:57"), topic: "mail", writer: "gw-b", completed: 2},
			rollup{at: at("11:57"), topic: "pdf", writer: "gw-a", completed: 4},
			rollup{at: at("11:59"), topic: "pdf", writer: "reaper", failed: 2, deaths: 1},
			rollup{at: at("12:00"), topic: "mail", writer: "gw-a", completed: 50}, // at the end: excluded
		)
		return b
	}

	t.Run("ZeroFillsMinutesAndSumsOverWritersAndTopics", func(t *testing.T) {
		t.Parallel()
		b := seed(t)
		points, err := b.store.Throughput(ctx, jobstore.ThroughputQuery{Step: time.Minute, Buckets: 5, End: end})
		require.NoError(t, err)
		require.Len(t, points, 5)
		for i, p := range points {
			require.True(t, p.Start.Equal(at("11:55").Add(time.Duration(i)*time.Minute)), "point %d starts %s", i, p.Start)
		}
		require.Equal(t, []counts{{}, {}, {9, 1, 0}, {}, {0, 2, 1}}, countsOf(points))
	})

	t.Run("SumsOneTopic", func(t *testing.T) {
		t.Parallel()
		b := seed(t)
		points, err := b.store.Throughput(ctx, jobstore.ThroughputQuery{Topic: "mail", Step: time.Minute, Buckets: 5, End: end})
		require.NoError(t, err)
		require.Equal(t, []counts{{}, {}, {5, 1, 0}, {}, {}}, countsOf(points))
		points, err = b.store.Throughput(ctx, jobstore.ThroughputQuery{Topic: "nobody", Step: time.Minute, Buckets: 3, End: end})
		require.NoError(t, err)
		require.Equal(t, []counts{{}, {}, {}}, countsOf(points), "a topic with no rows is all zeros")
	})

	t.Run("WiderBucketsSumTheirMinutes", func(t *testing.T) {
		t.Parallel()
		b := seed(t)
		points, err := b.store.Throughput(ctx, jobstore.ThroughputQuery{Step: 5 * time.Minute, Buckets: 3, End: end})
		require.NoError(t, err)
		require.True(t, points[0].Start.Equal(at("11:45")))
		require.Equal(t, []counts{{}, {100, 0, 0}, {9, 3, 1}}, countsOf(points))
	})

	t.Run("EndsAtTheDatabasesCurrentMinuteByDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var now time.Time
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT date_trunc('minute', now())`).Scan(&now))
		insertRollups(t, b.pool, rollup{at: now, topic: "mail", writer: "gw-a", completed: 7})
		points, err := b.store.Throughput(ctx, jobstore.ThroughputQuery{Step: time.Minute, Buckets: 3})
		require.NoError(t, err)
		require.Len(t, points, 3)
		// The minute written is in the series, whichever minute the read
		// ran in (it may have turned since the write).
		var total int64
		for i, p := range points {
			total += p.Completed
			if i > 0 {
				require.Equal(t, time.Minute, p.Start.Sub(points[i-1].Start))
			}
		}
		require.EqualValues(t, 7, total)
		require.False(t, points[2].Start.Before(now), "the last point is the current minute")
	})

	t.Run("RefusesAQueryItCannotAnswerNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tc := range []struct {
			q     jobstore.ThroughputQuery
			field string
		}{
			{jobstore.ThroughputQuery{Step: 90 * time.Second, Buckets: 5}, "step"},
			{jobstore.ThroughputQuery{Step: 0, Buckets: 5}, "step"},
			{jobstore.ThroughputQuery{Step: time.Minute, Buckets: 0}, "buckets"},
			{jobstore.ThroughputQuery{Step: time.Minute, Buckets: jobstore.ThroughputMaxBuckets + 1}, "buckets"},
			{jobstore.ThroughputQuery{Step: time.Minute, Buckets: 5, End: end.Add(time.Second)}, "end"},
		} {
			_, err := b.store.Throughput(ctx, tc.q)
			require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%+v", tc.q)
			require.Equal(t, tc.field, apierr.FieldOf(err))
		}
	})
}

// TestTopicsReadTheRollup: Store.Topics (topics.go) over the same rows the
// dashboard's per-topic table was first built against.
func TestTopicsReadTheRollup(t *testing.T) {
	t.Parallel()

	t.Run("CountsEveryTopicsJobsThroughputAndWorkers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 3 {
			insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusPending, Topic: "mail", SubmittedAt: time.Now().Add(-10 * time.Minute)})
		}
		insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusRunning, Topic: "mail"})
		insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusRetrying, Topic: "mail", MaxAttempts: 3})
		insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusDeadLettered, Topic: "pdf", MaxAttempts: 1})
		insertRow(t, b.pool, rowOpts{Status: pulsetype.StatusCompleted, Topic: "pdf"})
		var now time.Time
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT date_trunc('minute', now())`).Scan(&now))
		insertRollups(t, b.pool,
			rollup{at: now, topic: "pdf", writer: "gw-a", completed: 4, failed: 2, deaths: 1},
			rollup{at: now.Add(-30 * time.Minute), topic: "pdf", writer: "reaper", failed: 1},
			rollup{at: now.Add(-2 * time.Hour), topic: "pdf", writer: "gw-a", completed: 1000}, // older than an hour
			rollup{at: now.Add(-2 * time.Hour), topic: "old", writer: "gw-a", completed: 1},
		)
		_, err := b.store.OpenPresence(ctx, "gw-a", jobstore.Presence{WorkerID: "w1", Principal: "anonymous", Topics: []string{"mail", "idle"}}, time.Minute)
		require.NoError(t, err)

		got, err := b.store.Topics(ctx)
		require.NoError(t, err)
		byTopic := map[string]jobstore.TopicInfo{}
		for _, s := range got {
			byTopic[s.Topic] = s
		}
		require.Len(t, got, 3, "mail, pdf and idle; old had throughput only long ago: %+v", got)
		mail := byTopic["mail"]
		require.Equal(t, [4]int64{3, 1, 1, 0}, [4]int64{mail.Pending, mail.Running, mail.Retrying, mail.DeadLettered})
		require.EqualValues(t, 1, mail.ConnectedWorkers)
		require.Greater(t, *mail.OldestPendingAge, 5*time.Minute, "the oldest pending job has been due since it was submitted")
		pdf := byTopic["pdf"]
		require.EqualValues(t, 1, pdf.DeadLettered)
		require.Equal(t, [2]int64{4, 3}, [2]int64{pdf.CompletedLastHour, pdf.FailedLastHour})
		require.Nil(t, pdf.OldestPendingAge)
		require.EqualValues(t, 1, byTopic["idle"].ConnectedWorkers)
	})
}
