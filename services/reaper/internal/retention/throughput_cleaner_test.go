package retention_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/reaper/internal/reapmetrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/retention"
)

func TestThroughputCleaner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	// seed writes one row per writer for each day ago, three writers.
	seed := func(t *testing.T) *jobstore.Store {
		pool := pgtest.Pool(t)
		_, err := pool.Exec(ctx, `
			INSERT INTO job_throughput (bucket, topic, writer, completed, failed)
			SELECT date_trunc('minute', now() - make_interval(days => d), 'UTC') - make_interval(mins => d), 't', w, 5, 1
			FROM unnest(ARRAY[0, 1, 2, 6, 8, 10, 30]) AS d, unnest(ARRAY['gw-1', 'gw-2', 'reaper-1']) AS w`)
		require.NoError(t, err)
		return jobstore.New(pool)
	}
	days := func(t *testing.T, store *jobstore.Store) []int {
		var out []int
		rows, err := store.Pool().Query(ctx, `
			SELECT DISTINCT extract(day FROM now() - bucket)::int AS d FROM job_throughput ORDER BY d`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var d int
			require.NoError(t, rows.Scan(&d))
			out = append(out, d)
		}
		return out
	}

	t.Run("DeletesMinutesOlderThanTheRetentionInBatches", func(t *testing.T) {
		t.Parallel()
		store := seed(t)
		m := reapmetrics.New(prometheus.NewRegistry())
		c := retention.NewThroughputCleaner(retention.ThroughputConfig{Age: 7 * 24 * time.Hour, Batch: 2}, store, m, logger)
		n, err := c.Clean(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(9), n, "days 8, 10 and 30, three writers each")
		require.Equal(t, []int{0, 1, 2, 6}, days(t, store))
		require.EqualValues(t, 9, testutil.ToFloat64(m.ThroughputRowsDeleted))

		n, err = c.Clean(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "nothing more is due")
	})

	t.Run("ZeroKeepsEverything", func(t *testing.T) {
		t.Parallel()
		store := seed(t)
		c := retention.NewThroughputCleaner(retention.ThroughputConfig{Age: 0, Batch: 2}, store, nil, logger)
		n, err := c.Clean(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, []int{0, 1, 2, 6, 8, 10, 30}, days(t, store))
	})
}
