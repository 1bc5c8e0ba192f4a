package jobstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// TestInsertWakesAfterItsCommit: a submit's INSERT commits without
// sending a NOTIFY — Postgres serializes every notifying commit through
// its WAL flush (ADR-0061) — and the gateways' wake follows in a
// transaction of its own, with the payloads the trigger would have sent.
func TestInsertWakesAfterItsCommit(t *testing.T) {
	t.Parallel()

	// oneConnStore is a store on a pool of one backend, so the session
	// settings read back are the ones the store's inserts left.
	oneConnStore := func(t *testing.T) (*pgxpool.Pool, *jobstore.Store) {
		t.Helper()
		cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
		require.NoError(t, err)
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool, newStore(t, pool)
	}

	t.Run("ATransactionThatAsksForItGetsNoNotifyFromTheTrigger", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		listener := listenReady(t, b)
		conn, err := pgx.Connect(ctx, b.pool.Config().ConnString())
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(ctx) })

		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT set_config('pulse.ready_after_commit', 'on', true), set_config('pulse.ready_payloads', '', false)`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic, args) VALUES (gen_random_uuid(), 'later.a', '{}'), (gen_random_uuid(), 'later.b', '{}')`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO jobs (id, topic, args, next_run_at) VALUES (gen_random_uuid(), 'later.future', '{}', now() + interval '1 hour')`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		// Nothing arrived from the commit: the marker, sent after it, is
		// the first notification.
		_, err = b.pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, jobstore.ReadyChannel)
		require.NoError(t, err)
		require.Equal(t, []string{"marker"}, readyUntilMarker(t, listener))

		// The payloads wait in the session, the two ready topics of both
		// statements (not the future job's), and go out with the wake.
		var payloads string
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('pulse.ready_payloads')`).Scan(&payloads))
		require.ElementsMatch(t, []string{"later.a", "later.b"}, topicsOf(splitPayloads(payloads)))
		var sent int
		require.NoError(t, conn.QueryRow(ctx, jobstore.NotifyReadySQL).Scan(&sent))
		require.Equal(t, 2, sent)
		_, err = b.pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, jobstore.ReadyChannel)
		require.NoError(t, err)
		got := readyUntilMarker(t, listener)
		require.ElementsMatch(t, []string{"later.a", "later.b", "marker"}, topicsOf(got))
	})

	t.Run("ATransactionThatDoesNotAskNotifiesAtItsCommit", func(t *testing.T) {
		// A producer's own transaction (pulsetx) or psql: as before.
		t.Parallel()
		b := setup(t)
		listener := listenReady(t, b)
		_, err := b.pool.Exec(ctx, `INSERT INTO jobs (id, topic, args) VALUES (gen_random_uuid(), 'at.commit', '{}')`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, jobstore.ReadyChannel)
		require.NoError(t, err)
		require.Equal(t, []string{"at.commit", "marker"}, topicsOf(readyUntilMarker(t, listener)))
	})

	t.Run("TheStoresInsertLeavesItsWakeForAfterTheCommit", func(t *testing.T) {
		t.Parallel()
		pool, store := oneConnStore(t)
		keyed := newJob("store.b", 5)
		keyed.IdempotencyKey = "wake-after-commit"
		for _, batch := range [][]pulsetype.NewJob{
			{newJob("store.a", 5), newJob("store.b", 5), newJob("store.a", 5)}, // the plain INSERT
			{newJob("store.a", 5), keyed},                                      // the INSERT with conflict handling
		} {
			_, err := store.Insert(ctx, batch)
			require.NoError(t, err)
			var payloads string
			require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('pulse.ready_payloads', true)`).Scan(&payloads))
			require.ElementsMatch(t, []string{"store.a", "store.b"}, topicsOf(splitPayloads(payloads)),
				"the insert's transaction collected its wake instead of notifying at its commit")
		}
	})

	// The wake sent after the commit names the inserting transaction's
	// start, which is every inserted job's submitted_at, to the
	// microsecond: where a gateway whose claims are past it claims from
	// (ADR-0063).
	t.Run("TheWakeAfterTheCommitNamesWhenItsJobsWereSubmitted", func(t *testing.T) {
		t.Parallel()
		pool, store := oneConnStore(t)
		listener := listenOn(t, pool)

		jobs := []pulsetype.NewJob{newJob("when.a", 5), newJob("when.b", 5), newJob("when.a", 5)}
		_, err := store.Insert(ctx, jobs)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, jobstore.ReadyChannel)
		require.NoError(t, err)
		got := readyUntilMarker(t, listener)
		require.Len(t, got, 3)

		var submitted time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT DISTINCT submitted_at FROM jobs`).Scan(&submitted),
			"one INSERT: one submitted_at")
		var topics []string
		for _, p := range got[:2] {
			topic, at, ok := jobstore.ReadyAt(p)
			require.True(t, ok, "%q", p)
			require.True(t, at.Equal(submitted), "%q names %v, the jobs were submitted at %v", p, at, submitted)
			topics = append(topics, topic)
		}
		require.ElementsMatch(t, []string{"when.a", "when.b"}, topics)
	})

	t.Run("ARefusedInsertSendsNoWakeAndKeepsItsConnection", func(t *testing.T) {
		t.Parallel()
		pool, store := oneConnStore(t)
		listener := listenOn(t, pool)

		_, err := pool.Exec(ctx, `SELECT 1`) // the pool's one connection
		require.NoError(t, err)
		conns := pool.Stat().NewConnsCount()

		// An insert before it leaves its payloads in the session; the
		// refused insert's pipeline stops at its error, so its wake, which
		// would read them, never runs.
		_, err = store.Insert(ctx, []pulsetype.NewJob{newJob("before", 5)})
		require.NoError(t, err)

		refused := []pulsetype.NewJob{newJob("refused", 5), newJob("refused", 5)}
		refused[1].Args = []byte(`{"a":"x\u0000y"}`) // jsonb cannot hold it
		_, err = store.Insert(ctx, refused)
		var member *jobstore.MemberError
		require.ErrorAs(t, err, &member)

		_, err = store.Insert(ctx, []pulsetype.NewJob{newJob("accepted", 5)})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, jobstore.ReadyChannel)
		require.NoError(t, err)
		require.Equal(t, []string{"before", "accepted", "marker"}, topicsOf(readyUntilMarker(t, listener)),
			"the refused batch's topic was never announced, nor the insert's before it again")
		require.Equal(t, conns, pool.Stat().NewConnsCount(),
			"the refused insert's aborted transaction was rolled back, not its connection closed")
		require.Equal(t, 2, countJobs(t, pool))
	})
}

// TestAWakeThatFailsAfterTheCommitDoesNotFailTheInsert: once the
// INSERT has committed its jobs are in, so a wake that then fails
// (Postgres refuses a NOTIFY when its queue is full; here a payload over
// its 8,000-byte limit stands in) is logged, not returned: a producer
// told its submit failed would submit the same jobs again.
func TestAWakeThatFailsAfterTheCommitDoesNotFailTheInsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(ctx, `
CREATE FUNCTION test_oversized_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('pulse.ready_payloads', repeat('x', 9000), false);
    RETURN NULL;
END
$$;
-- after jobs_notify_insert: triggers fire in name order
CREATE TRIGGER zz_oversized_wake AFTER INSERT ON jobs FOR EACH STATEMENT EXECUTE FUNCTION test_oversized_wake();`)
	require.NoError(t, err)
	var logged bytes.Buffer
	store := newStore(t, b.pool, jobstore.LogWakeErrors(slog.New(slog.NewJSONHandler(&logged, nil))))

	job := newJob("wake.fails", 5)
	res, err := store.Insert(ctx, []pulsetype.NewJob{job})
	require.NoError(t, err, "the jobs were committed; the wake's failure is not the insert's")
	require.Equal(t, job.ID, res[0].ID)
	require.False(t, res[0].Duplicate)
	require.Equal(t, 1, countJobs(t, b.pool))
	require.Contains(t, logged.String(), "payload string too long")
	require.Contains(t, logged.String(), `"level":"WARN"`)

	// The connection the failed wake ran on is still in use.
	_, err = store.Insert(ctx, []pulsetype.NewJob{newJob("wake.fails", 5)})
	require.NoError(t, err)
	require.Equal(t, 2, countJobs(t, b.pool))
}

// listenOn is a connection of its own to pool's database, listening on
// ReadyChannel.
func listenOn(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	listener, err := pgx.Connect(ctx, pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { listener.Close(ctx) })
	_, err = listener.Exec(ctx, "LISTEN "+jobstore.ReadyChannel)
	require.NoError(t, err)
	return listener
}

// readyUntilMarker reads the listener's ReadyChannel payloads up to and
// including the first "marker".
func readyUntilMarker(t *testing.T, listener *pgx.Conn) []string {
	t.Helper()
	var got []string
	for {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listener.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err)
		got = append(got, n.Payload)
		if n.Payload == "marker" {
			return got
		}
	}
}

// splitPayloads is pulse.ready_payloads as a list ("" holds none).
func splitPayloads(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// topicsOf strips the ' new' marker (ADR-0055) and the submit time
// (ADR-0063) from payloads.
func topicsOf(payloads []string) []string {
	out := make([]string, len(payloads))
	for i, p := range payloads {
		if topic, _, ok := jobstore.ReadyAt(p); ok {
			out[i] = topic
			continue
		}
		out[i] = strings.TrimSuffix(p, jobstore.NewJobsReady)
	}
	return out
}
