package jobstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// txQueryer adapts a pgx.Tx to jobstore.Queryer, as package pulsetx does.
type txQueryer struct{ tx pgx.Tx }

func (q txQueryer) QueryText(ctx context.Context, sql string, args ...any) ([]string, error) {
	rows, err := q.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// InsertOne inside a caller's transaction: rolled back, nothing is left
// (not even a unique key); committed, the job is there with what it was
// given; duplicates answer their holder; bad data is refused naming the
// field.
func TestInsertOneInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	inTx := func(t *testing.T, commit bool, fn func(q jobstore.Queryer)) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		fn(txQueryer{tx})
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}

	rolled := uniqueJob("tx.one", `{"order":1}`, time.Hour)
	inTx(t, false, func(q jobstore.Queryer) {
		res, err := jobstore.InsertOne(ctx, q, rolled)
		require.NoError(t, err)
		require.Equal(t, pulsetype.Inserted{ID: rolled.ID}, res)
	})
	require.Zero(t, countTopic(t, pool, "tx.one"))
	var keys int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_uniques`).Scan(&keys))
	require.Zero(t, keys)

	kept := uniqueJob("tx.one", `{"order":1}`, time.Hour)
	kept.Timeout, kept.IdempotencyKey, kept.RunAt = 5*time.Second, "order-1", time.Now().Add(time.Hour).Truncate(time.Microsecond)
	inTx(t, true, func(q jobstore.Queryer) {
		res, err := jobstore.InsertOne(ctx, q, kept)
		require.NoError(t, err)
		require.Equal(t, pulsetype.Inserted{ID: kept.ID}, res)
		// Within the same transaction, the same args are its duplicate.
		res, err = jobstore.InsertOne(ctx, q, uniqueJob("tx.one", `{"order": 1}`, time.Minute))
		require.NoError(t, err)
		require.Equal(t, pulsetype.Inserted{ID: kept.ID, Duplicate: true}, res)
	})
	got, err := newStore(t, pool).Get(ctx, kept.ID)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, got.Timeout)
	require.Equal(t, "order-1", got.IdempotencyKey)
	require.True(t, kept.RunAt.Equal(got.NextRunAt))

	inTx(t, true, func(q jobstore.Queryer) {
		keyed := newJob("tx.one", 5)
		keyed.IdempotencyKey = "order-1"
		res, err := jobstore.InsertOne(ctx, q, keyed)
		require.NoError(t, err)
		require.Equal(t, pulsetype.Inserted{ID: kept.ID, Duplicate: true}, res)
	})
	require.Equal(t, 1, countTopic(t, pool, "tx.one"))

	inTx(t, false, func(q jobstore.Queryer) {
		bad := newJob("tx.one", 5)
		bad.Timeout = 48 * time.Hour
		_, err := jobstore.InsertOne(ctx, q, bad)
		require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err))
		require.Equal(t, "timeout", apierr.FieldOf(err))
	})
}
