package jobstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func TestWorkerPresence(t *testing.T) {
	t.Parallel()

	present := func(t *testing.T, b *testBundle, topic string) (bool, *time.Time) {
		t.Helper()
		served, seen, err := b.store.TopicPresence(ctx, topic)
		require.NoError(t, err)
		return served, seen
	}
	rows := func(t *testing.T, b *testBundle) int {
		t.Helper()
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM worker_presence`).Scan(&n))
		return n
	}

	t.Run("AnOpenStreamServesItsTopicsUntilItLeaves", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		served, seen := present(t, b, "mail")
		require.False(t, served)
		require.Nil(t, seen, "never served")

		at, err := b.store.OpenPresence(ctx, "gw-1", jobstore.Presence{WorkerID: "w1", Principal: "alice", Topics: []string{"mail", "sms"}}, time.Minute)
		require.NoError(t, err)
		for _, topic := range []string{"mail", "sms"} {
			served, seen = present(t, b, topic)
			require.True(t, served, topic)
			require.NotNil(t, seen)
		}
		served, _ = present(t, b, "ma") // a prefix is another topic
		require.False(t, served)

		require.NoError(t, b.store.LeavePresence(ctx, []jobstore.Left{{WorkerID: "w1", ConnectedAt: at}}))
		require.Zero(t, rows(t, b))
		served, seen = present(t, b, "mail")
		require.False(t, served)
		require.NotNil(t, seen, "the topic remembers when its last worker left")
		require.WithinDuration(t, time.Now(), *seen, 5*time.Second)
	})

	t.Run("AnotherIdentityCannotOpenALiveWorkerID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := jobstore.Presence{WorkerID: "w1", Principal: "alice", Topics: []string{"mail"}}
		_, err := b.store.OpenPresence(ctx, "gw-1", p, time.Minute)
		require.NoError(t, err)

		bob := p
		bob.Principal = "bob"
		_, err = b.store.OpenPresence(ctx, "gw-2", bob, time.Minute)
		require.Equal(t, apierr.KindAlreadyExists, apierr.KindOf(err), err)
		require.Contains(t, err.Error(), `"w1"`)
		require.NotContains(t, err.Error(), "alice", "the refusal does not name the other identity")

		// The same identity may reconnect (on any gateway), racing its
		// old stream; the old stream's close then leaves the new row be.
		old, err := b.store.OpenPresence(ctx, "gw-1", p, time.Minute)
		require.NoError(t, err)
		again, err := b.store.OpenPresence(ctx, "gw-2", p, time.Minute)
		require.NoError(t, err)
		require.True(t, again.After(old))
		require.NoError(t, b.store.LeavePresence(ctx, []jobstore.Left{{WorkerID: "w1", ConnectedAt: old}}))
		served, _ := present(t, b, "mail")
		require.True(t, served, "the reconnect's row survives the old stream's close")

		// Once the row expires (its gateway died), the worker id is free.
		_, err = b.pool.Exec(ctx, `UPDATE worker_presence SET last_seen = now() - interval '2 minutes', expires_at = now() - interval '1 minute'`)
		require.NoError(t, err)
		served, _ = present(t, b, "mail")
		require.False(t, served, "an expired row serves nothing")
		_, err = b.store.OpenPresence(ctx, "gw-2", bob, time.Minute)
		require.NoError(t, err)
		var principal string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT principal FROM worker_presence WHERE worker_id = 'w1'`).Scan(&principal))
		require.Equal(t, "bob", principal)
	})

	t.Run("RefreshIsOneStatementForEveryStreamAndKeepsOnlyItsOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var entries []jobstore.Presence
		for _, id := range []string{"w1", "w2", "w3"} {
			e := jobstore.Presence{WorkerID: id, Principal: "alice", Topics: []string{"t." + id}}
			at, err := b.store.OpenPresence(ctx, "gw-1", e, time.Minute)
			require.NoError(t, err)
			e.ConnectedAt = at
			entries = append(entries, e)
		}
		// w2's row expired and bob took the worker id; w3's row vanished.
		_, err := b.pool.Exec(ctx, `UPDATE worker_presence SET principal = 'bob' WHERE worker_id = 'w2'`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `DELETE FROM worker_presence WHERE worker_id = 'w3'`)
		require.NoError(t, err)
		var before time.Time
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT expires_at FROM worker_presence WHERE worker_id = 'w1'`).Scan(&before))

		kept, swept, err := b.store.RefreshPresence(ctx, "gw-1", entries, 2*time.Minute, 100)
		require.NoError(t, err)
		require.Zero(t, swept)
		require.Equal(t, map[string]bool{"w1": true, "w3": true}, kept)
		var after time.Time
		var connected time.Time
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT expires_at, connected_at FROM worker_presence WHERE worker_id = 'w1'`).Scan(&after, &connected))
		require.True(t, after.After(before), "the lease of presence was extended")
		require.True(t, connected.Equal(entries[0].ConnectedAt), "a refresh keeps the open's mark")
		served, _ := present(t, b, "t.w3")
		require.True(t, served, "a vanished row comes back")
		var principal string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT principal FROM worker_presence WHERE worker_id = 'w2'`).Scan(&principal))
		require.Equal(t, "bob", principal, "a live row of another identity is not taken")
	})

	t.Run("ExpiredRowsAreSweptInBoundedBatchesAndRemembered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, id := range []string{"a", "b", "c"} {
			_, err := b.store.OpenPresence(ctx, "gw-dead", jobstore.Presence{WorkerID: id, Principal: "p", Topics: []string{"dead"}}, time.Minute)
			require.NoError(t, err)
		}
		_, err := b.pool.Exec(ctx, `UPDATE worker_presence SET last_seen = now() - interval '10 minutes', expires_at = now() - interval '9 minutes'`)
		require.NoError(t, err)
		_, err = b.store.OpenPresence(ctx, "gw-live", jobstore.Presence{WorkerID: "live", Principal: "p", Topics: []string{"live"}}, time.Minute)
		require.NoError(t, err)

		_, swept, err := b.store.RefreshPresence(ctx, "gw-live", nil, time.Minute, 2)
		require.NoError(t, err)
		require.Equal(t, 2, swept, "at most the batch")
		_, swept, err = b.store.RefreshPresence(ctx, "gw-live", nil, time.Minute, 2)
		require.NoError(t, err)
		require.Equal(t, 1, swept)
		require.Equal(t, 1, rows(t, b), "the live row stays")

		served, seen := present(t, b, "dead")
		require.False(t, served)
		require.NotNil(t, seen)
		require.WithinDuration(t, time.Now().Add(-10*time.Minute), *seen, time.Minute, "last seen is the dead gateway's last refresh")
	})

	t.Run("ATopicsLastSeenNeverGoesBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.pool.Exec(ctx, `INSERT INTO worker_topic_seen (topic, last_seen) VALUES ('t', now() + interval '1 hour')`)
		require.NoError(t, err)
		at, err := b.store.OpenPresence(ctx, "gw", jobstore.Presence{WorkerID: "w", Principal: "p", Topics: []string{"t"}}, time.Minute)
		require.NoError(t, err)
		require.NoError(t, b.store.LeavePresence(ctx, []jobstore.Left{{WorkerID: "w", ConnectedAt: at}}))
		_, seen := present(t, b, "t")
		require.True(t, seen.After(time.Now().Add(30*time.Minute)))
	})

	t.Run("ErrorsAreTyped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.OpenPresence(ctx, "gw", jobstore.Presence{WorkerID: "w", Principal: "p", Topics: []string{"t"}}, 0)
		require.Error(t, err, "a zero TTL breaks the row's CHECK")
		require.False(t, errors.Is(err, apierr.ErrUnavailable))
	})
}
