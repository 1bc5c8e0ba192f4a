package retention_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/reaper/internal/reapmetrics"
	"github.com/pulsequeue/pulse/services/reaper/internal/retention"
)

// seedPrunable writes rows of every table the pruner keeps bounded, some
// due and some not, and returns the pool.
func seedPrunable(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	for _, q := range []string{
		// Presence: three rows whose gateway stopped refreshing them long
		// ago, and one live row serving topic live.
		`INSERT INTO worker_presence (worker_id, principal, gateway, topics, connected_at, last_seen, expires_at)
		 SELECT 'gone-' || i, 'anonymous', 'gw-dead', ARRAY['gone.' || i], now() - interval '2 hours',
		        now() - interval '2 hours', now() - interval '1 hour'
		 FROM generate_series(1, 3) AS i`,
		`INSERT INTO worker_presence (worker_id, principal, gateway, topics, expires_at)
		 VALUES ('alive', 'anonymous', 'gw-1', ARRAY['live'], now() + interval '1 hour')`,
		// Topics last served 40 days ago (five, and live, which a live
		// stream still serves) and one day ago.
		`INSERT INTO worker_topic_seen (topic, last_seen)
		 SELECT 'old.' || i, now() - interval '40 days' FROM generate_series(1, 5) AS i`,
		`INSERT INTO worker_topic_seen (topic, last_seen) VALUES
		 ('live', now() - interval '40 days'), ('recent', now() - interval '1 day')`,
		// The audit: three rows 100 days old, one 10 days, one an hour.
		`INSERT INTO control_events (scope, action, mode, actor, at, version)
		 SELECT '*', 'pause', 'drain', 'ops', now() - make_interval(days => d), 1
		 FROM unnest(ARRAY[100, 100, 100, 10]) AS d`,
		`INSERT INTO control_events (scope, action, mode, actor, at, version)
		 VALUES ('*', 'resume', 'drain', 'ops', now() - interval '1 hour', 2)`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	return pool
}

func strings(t *testing.T, pool *pgxpool.Pool, q string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), q)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestPruner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("DeletesWhatIsDueInBatchesAndKeepsTheRest", func(t *testing.T) {
		t.Parallel()
		pool := seedPrunable(t)
		m := reapmetrics.New(prometheus.NewRegistry())
		p := retention.NewPruner(retention.PruneConfig{
			TopicSeenAge: 30 * 24 * time.Hour, AuditAge: 90 * 24 * time.Hour, Batch: 2,
		}, jobstore.New(pool), m, logger)

		got, err := p.Prune(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{
			retention.TablePresence: 3, retention.TableTopicSeen: 5, retention.TableControlEvents: 3,
		}, got)
		require.Equal(t, []string{"alive"}, strings(t, pool, `SELECT worker_id FROM worker_presence`))
		// The expired rows' topics are remembered as served an hour before
		// they expired, like the gateways' sweep does; they are recent,
		// so they stay.
		require.ElementsMatch(t, []string{"gone.1", "gone.2", "gone.3", "live", "recent"},
			strings(t, pool, `SELECT topic FROM worker_topic_seen`), "a topic a live stream serves is kept")
		require.Equal(t, []string{"10", "0"},
			strings(t, pool, `SELECT extract(day FROM now() - at)::int::text FROM control_events ORDER BY id`))
		require.EqualValues(t, 3, testutil.ToFloat64(m.RowsPruned.WithLabelValues(retention.TablePresence)))
		require.EqualValues(t, 5, testutil.ToFloat64(m.RowsPruned.WithLabelValues(retention.TableTopicSeen)))
		require.EqualValues(t, 3, testutil.ToFloat64(m.RowsPruned.WithLabelValues(retention.TableControlEvents)))

		got, err = p.Prune(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{retention.TablePresence: 0, retention.TableTopicSeen: 0, retention.TableControlEvents: 0},
			got, "nothing more is due")
	})

	t.Run("ZeroAgesKeepTopicsAndAudit", func(t *testing.T) {
		t.Parallel()
		pool := seedPrunable(t)
		p := retention.NewPruner(retention.PruneConfig{Batch: 10}, jobstore.New(pool), nil, logger)
		got, err := p.Prune(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{retention.TablePresence: 3}, got, "expired presence is always swept")
		require.Len(t, strings(t, pool, `SELECT topic FROM worker_topic_seen`), 10)
		require.Len(t, strings(t, pool, `SELECT id::text FROM control_events`), 5)
	})

	t.Run("TheSchemaKeepsTheYoungAuditAndEveryUpdateRefused", func(t *testing.T) {
		t.Parallel()
		pool := seedPrunable(t)
		var pgErr *pgconn.PgError
		_, err := pool.Exec(ctx, `DELETE FROM control_events WHERE at > now() - interval '1 day'`)
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "control_events_append_only", pgErr.ConstraintName)
		_, err = pool.Exec(ctx, `UPDATE control_events SET actor = 'forged' WHERE at < now() - interval '50 days'`)
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "control_events_append_only", pgErr.ConstraintName)
		require.Len(t, strings(t, pool, `SELECT id::text FROM control_events`), 5)

		_, err = jobstore.New(pool).DeleteControlEvents(ctx, time.Hour, 10)
		require.ErrorContains(t, err, "older_than", "the store refuses a retention below the floor, naming the argument")
	})
}
