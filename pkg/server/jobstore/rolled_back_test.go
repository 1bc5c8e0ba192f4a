package jobstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// An operator's DDL on jobs (pg_repack's swap, an ALTER TABLE, a VACUUM
// FULL) holds the table's strongest lock; where the database or role sets
// a lock_timeout, the statements queued behind it give up. That is the
// database's doing, not the caller's: the caller hears Unavailable (retry),
// never Internal, nothing is half-written, and the same call succeeds once
// the lock is gone.
func TestStatementsPostgresRollsBack(t *testing.T) {
	t.Parallel()

	t.Run("ALockWaitPastLockTimeoutIsUnavailableAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		raw := pgtest.URLWithDefault(t, "lock_timeout", "100ms")
		admin, err := pgx.Connect(ctx, raw)
		require.NoError(t, err)
		t.Cleanup(func() { _ = admin.Close(context.WithoutCancel(ctx)) })
		pool, err := pgxpool.New(ctx, raw)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		store := newStore(t, pool)

		holder, err := admin.Begin(ctx)
		require.NoError(t, err)
		_, err = holder.Exec(ctx, `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE`)
		require.NoError(t, err)

		unavailable := func(t *testing.T, err error) {
			t.Helper()
			require.Error(t, err)
			require.Equal(t, apierr.KindUnavailable, apierr.KindOf(err), "%v", err)
			require.Equal(t, codes.Unavailable, apierr.GRPCStatus(err).Code())
			require.ErrorContains(t, err, "lock timeout")
		}
		_, err = store.Insert(ctx, []pulsetype.NewJob{newJob("locked.topic", 5), newJob("locked.topic", 5)})
		unavailable(t, err)
		_, errs := store.InsertEach(ctx, []pulsetype.NewJob{newJob("locked.topic", 5), newJob("locked.topic", 5)})
		require.Len(t, errs, 2)
		for _, err := range errs {
			unavailable(t, err)
		}
		_, err = store.Claim(ctx, []string{"locked.topic"}, slots("w1", 1), ttl)
		unavailable(t, err)

		require.NoError(t, holder.Rollback(ctx))
		job := newJob("locked.topic", 5)
		_, err = store.Insert(ctx, []pulsetype.NewJob{job})
		require.NoError(t, err, "the same call succeeds once the lock is gone")
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
		require.Equal(t, 1, n, "only the job inserted after the lock: the refused calls wrote nothing")
	})
}
