package waiter_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/pulsequeue/pulse/services/control-api/internal/waiter"
)

func listeners(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT process FROM settle_listeners WHERE until > now() ORDER BY process`)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var p string
		require.NoError(t, rows.Scan(&p))
		out = append(out, p)
	}
	require.NoError(t, rows.Err())
	return out
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The first waiter registers the process's row; a notification naming a
// job wakes every waiter of that job and no other; a released waiter
// leaves no trace; after the linger without waiters the row goes; Stop
// wakes whoever still waits and removes the row.
func TestHub(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	t.Cleanup(func() { _ = store.Close() })
	hub := waiter.New(store, waiter.Options{Process: "p1", ListenerTTL: 300 * time.Millisecond, Linger: time.Millisecond})
	require.NoError(t, hub.Start(t.Context()))
	require.Empty(t, listeners(t, pool), "no waiter, no row: settles notify nobody")

	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	wa1, ra1, err := hub.Watch(t.Context(), a)
	require.NoError(t, err)
	wa2, ra2, err := hub.Watch(t.Context(), a)
	require.NoError(t, err)
	wb, rb, err := hub.Watch(t.Context(), b)
	require.NoError(t, err)
	require.Equal(t, []string{"p1"}, listeners(t, pool))
	require.Equal(t, 3, hub.Waiters())

	hub.Notify("not-a-uuid," + uuid.NewString() + "," + a.String())
	require.True(t, closed(wa1))
	require.True(t, closed(wa2))
	require.False(t, closed(wb))
	ra1()
	ra2()
	require.Equal(t, 1, hub.Waiters())

	// The row outlives its TTL while someone waits: the hub refreshes it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var refreshed bool
		assert.NoError(c, pool.QueryRow(t.Context(),
			`SELECT until > now() + interval '250 milliseconds' FROM settle_listeners WHERE process = 'p1'`).Scan(&refreshed))
		assert.True(c, refreshed)
	}, proctest.Patience, 10*time.Millisecond)
	require.Equal(t, []string{"p1"}, listeners(t, pool))

	rb()
	require.Zero(t, hub.Waiters())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		assert.NoError(c, pool.QueryRow(t.Context(), `SELECT count(*) FROM settle_listeners`).Scan(&n))
		assert.Zero(c, n)
	}, proctest.Patience, 10*time.Millisecond, "the row goes after the linger")

	wc, rc, err := hub.Watch(t.Context(), b)
	require.NoError(t, err)
	defer rc()
	require.NoError(t, hub.Stop(t.Context()))
	require.True(t, closed(wc), "stopping wakes every waiter")
	require.Empty(t, listeners(t, pool))
	_, _, err = hub.Watch(t.Context(), b)
	require.ErrorIs(t, err, waiter.ErrStopped)
}

// A recheck (a resync after the LISTEN connection came back, or the one
// after the row was created) wakes the waiters of jobs that finished
// unheard, and only those, in one read.
func TestHubRecheckWakesFinishedJobs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	t.Cleanup(func() { _ = store.Close() })
	hub := waiter.New(store, waiter.Options{Process: "p2", RecheckAfter: time.Hour})
	require.NoError(t, hub.Start(t.Context()))
	t.Cleanup(func() { _ = hub.Stop(t.Context()) })

	ins, err := store.Insert(t.Context(), []pulsetype.NewJob{
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Args: []byte(`{}`), Priority: 5, MaxAttempts: 1},
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Args: []byte(`{}`), Priority: 5, MaxAttempts: 1},
	})
	require.NoError(t, err)
	live, canceled := ins[0].ID, ins[1].ID
	gone := uuid.Must(uuid.NewV7())
	wLive, rLive, err := hub.Watch(t.Context(), live)
	require.NoError(t, err)
	defer rLive()
	wCanceled, rCanceled, err := hub.Watch(t.Context(), canceled)
	require.NoError(t, err)
	defer rCanceled()
	wGone, rGone, err := hub.Watch(t.Context(), gone)
	require.NoError(t, err)
	defer rGone()

	// Canceled behind the hub's back: a row forged without its NOTIFY.
	_, err = pool.Exec(t.Context(), `UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE id = $1`, canceled)
	require.NoError(t, err)
	hub.Resync()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, closed(wCanceled))
		assert.True(c, closed(wGone), "a job that no longer exists will not finish")
	}, proctest.Patience, 10*time.Millisecond)
	require.False(t, closed(wLive))
}

// The hub vouches that a job is unfinished only while nothing could have
// finished it unheard: after a read under a registered waiter, until a
// settle names it, a resync or Stop, RenewGap after its last waiter left,
// or KnownFor after the read. A read that raced a settle (the waiter was
// woken before MarkUnfinished) or a resync records nothing.
func TestHubKnowsUnfinishedJobs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	t.Cleanup(func() { _ = store.Close() })
	hub := waiter.New(store, waiter.Options{Process: "p3", RecheckAfter: time.Hour, RenewGap: time.Hour})
	require.NoError(t, hub.Start(t.Context()))
	t.Cleanup(func() { _ = hub.Stop(t.Context()) })

	// watchRead watches id and, as a Wait does when the hub does not know
	// it, records it read unfinished; it returns the release.
	watchRead := func(id uuid.UUID) func() {
		wake, release, err := hub.Watch(t.Context(), id)
		require.NoError(t, err)
		known, token := hub.Known(id)
		require.False(t, known)
		hub.MarkUnfinished(id, wake, token)
		return release
	}
	known := func(id uuid.UUID) bool {
		k, _ := hub.Known(id)
		return k
	}

	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	require.False(t, known(a), "never read: not known")
	release := watchRead(a)
	require.True(t, known(a))
	release()
	require.True(t, known(a), "a renewal within the gap needs no read")
	require.False(t, known(b))

	hub.Notify(a.String())
	require.False(t, known(a), "a settle named it, with no waiter registered")

	// A resync (notifications may have been lost) reads every known job
	// again: one that finished unheard is forgotten, and its waiter woken;
	// one still unfinished stays known.
	ins, err := store.Insert(t.Context(), []pulsetype.NewJob{
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Args: []byte(`{}`), Priority: 5, MaxAttempts: 1},
	})
	require.NoError(t, err)
	live := ins[0].ID
	watchRead(live)()
	wakeA, releaseA, err := hub.Watch(t.Context(), a)
	require.NoError(t, err)
	_, token := hub.Known(a)
	hub.MarkUnfinished(a, wakeA, token) // a does not exist: the recheck finds it finished
	hub.Resync()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, closed(wakeA))
	}, proctest.Patience, 5*time.Millisecond)
	releaseA()
	require.False(t, known(a))
	require.True(t, known(live), "read again, still unfinished")

	// The waiter was woken between its read and the mark: the read may
	// predate the settle, so nothing is recorded.
	wake, release, err := hub.Watch(t.Context(), b)
	require.NoError(t, err)
	_, token = hub.Known(b)
	hub.Notify(b.String())
	require.True(t, closed(wake))
	hub.MarkUnfinished(b, wake, token)
	require.False(t, known(b))
	release()

	// A recheck collected its ids between a waiter's read and its mark:
	// the read may predate a settle the recheck is for, so the mark
	// records nothing; the recheck's own read vouches for the job if it is
	// unfinished, and wakes its waiter if it finished unheard.
	ins, err = store.Insert(t.Context(), []pulsetype.NewJob{
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Args: []byte(`{}`), Priority: 5, MaxAttempts: 1},
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Args: []byte(`{}`), Priority: 5, MaxAttempts: 1},
	})
	require.NoError(t, err)
	unfinished, unheard := ins[0].ID, ins[1].ID
	wakeU, releaseU, err := hub.Watch(t.Context(), unfinished)
	require.NoError(t, err)
	_, tokenU := hub.Known(unfinished)
	wakeH, releaseH, err := hub.Watch(t.Context(), unheard)
	require.NoError(t, err)
	_, tokenH := hub.Known(unheard)
	// Canceled behind the hub's back: a row forged without its NOTIFY.
	_, err = pool.Exec(t.Context(), `UPDATE jobs SET status = 'CANCELED', finished_at = now() WHERE id = $1`, unheard)
	require.NoError(t, err)
	hub.Resync()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, closed(wakeH))
	}, proctest.Patience, 5*time.Millisecond, "the recheck ran")
	require.True(t, known(unfinished), "vouched for by the recheck's read")
	hub.MarkUnfinished(unheard, wakeH, tokenH)
	require.False(t, known(unheard), "a late mark of a job the recheck found finished records nothing")
	hub.MarkUnfinished(unfinished, wakeU, tokenU)
	require.False(t, closed(wakeU))
	releaseU()
	releaseH()

	require.NoError(t, hub.Stop(t.Context()))
	require.False(t, known(a))
}

// What the hub knows lapses RenewGap after the job's last waiter left,
// and KnownFor after the read even while the job is waited for.
func TestHubForgetsInTime(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := jobstore.New(pool)
	t.Cleanup(func() { _ = store.Close() })
	start := func(opts waiter.Options) *waiter.Hub {
		opts.RecheckAfter = time.Hour
		hub := waiter.New(store, opts)
		require.NoError(t, hub.Start(t.Context()))
		t.Cleanup(func() { _ = hub.Stop(t.Context()) })
		return hub
	}
	read := func(hub *waiter.Hub, id uuid.UUID) func() {
		wake, release, err := hub.Watch(t.Context(), id)
		require.NoError(t, err)
		_, token := hub.Known(id)
		hub.MarkUnfinished(id, wake, token)
		return release
	}

	gap := start(waiter.Options{Process: "p4", RenewGap: 20 * time.Millisecond})
	id := uuid.Must(uuid.NewV7())
	read(gap, id)()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		k, _ := gap.Known(id)
		assert.False(c, k)
	}, proctest.Patience, 5*time.Millisecond, "forgotten after the gap")

	age := start(waiter.Options{Process: "p5", KnownFor: 20 * time.Millisecond})
	release := read(age, id)
	defer release()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		k, _ := age.Known(id)
		assert.False(c, k)
	}, proctest.Patience, 5*time.Millisecond, "a read vouches for KnownFor only, even while waited for")
}
