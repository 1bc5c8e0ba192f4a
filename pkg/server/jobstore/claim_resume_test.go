package jobstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// pendingInDispatchOrder lists the claimable jobs of topic in dispatch
// order, as Postgres orders them.
func pendingInDispatchOrder(t *testing.T, b *testBundle, topic string) []uuid.UUID {
	t.Helper()
	rows, err := b.pool.Query(ctx, `SELECT id FROM jobs WHERE topic = $1 AND status = 'PENDING' ORDER BY priority DESC, submitted_at, id`, topic)
	require.NoError(t, err)
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func claimedIDs(claimed []pulsetype.Claimed) []uuid.UUID {
	ids := make([]uuid.UUID, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
	}
	return ids
}

func TestClaimAfter(t *testing.T) {
	t.Parallel()

	t.Run("TakesTheJobsAfterTheCursorInDispatchOrderAcrossPriorities", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "r", 7, 3)
		insertJobs(t, b, "r", 5, 5)
		insertJobs(t, b, "r", 3, 2)
		order := pendingInDispatchOrder(t, b, "r")
		require.Len(t, order, 10)

		first, err := b.store.Claim(ctx, []string{"r"}, slots("w", 2), ttl)
		require.NoError(t, err)
		require.ElementsMatch(t, order[:2], claimedIDs(first))
		cursor, ok := jobstore.LastClaimed(first)
		require.True(t, ok)
		require.Equal(t, order[1], cursor.ID)

		// The rest of priority 7, then into priority 5.
		next, err := b.store.ClaimAfter(ctx, []string{"r"}, slots("w", 4), ttl, cursor)
		require.NoError(t, err)
		require.ElementsMatch(t, order[2:6], claimedIDs(next))
		cursor, _ = jobstore.LastClaimed(next)
		require.Equal(t, order[5], cursor.ID)
		// Past the end of priority 5, on into priority 3.
		next, err = b.store.ClaimAfter(ctx, []string{"r"}, slots("w", 3), ttl, cursor)
		require.NoError(t, err)
		require.ElementsMatch(t, order[6:9], claimedIDs(next))
	})

	t.Run("JobsBeforeTheCursorWaitWhileThereAreJobsAfterIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "s", 5, 6)
		order := pendingInDispatchOrder(t, b, "s")
		// A cursor past the first three: as if another gateway had taken
		// them and given them back (a claim that timed out).
		cursor := cursorOf(t, b, order[2])
		next, err := b.store.ClaimAfter(ctx, []string{"s"}, slots("w", 3), ttl, cursor)
		require.NoError(t, err)
		require.ElementsMatch(t, order[3:], claimedIDs(next))
		// A higher priority submitted now sorts before the cursor: a claim
		// from the head takes it first.
		urgent := insertJobs(t, b, "s", 9, 1)
		head, err := b.store.Claim(ctx, []string{"s"}, slots("w", 1), ttl)
		require.NoError(t, err)
		require.Equal(t, urgent, claimedIDs(head))
	})

	t.Run("TakesHigherPrioritiesAndWhatFollowsTheCursor", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "u", 5, 4)
		order := pendingInDispatchOrder(t, b, "u")
		cursor := cursorOf(t, b, order[1]) // order[0] sorts before it, unclaimed: a straggler
		urgent := insertJobs(t, b, "u", 9, 2)
		// The higher priority at once, then what follows the cursor, and
		// no more: what sorts before it in its priority is a rescan's
		// (ADR-0050).
		got, err := b.store.ClaimAfter(ctx, []string{"u"}, []string{"a", "b", "c", "d", "e", "f"}, ttl, cursor)
		require.NoError(t, err)
		require.Equal(t, append(urgent, order[2:]...), claimedIDs(got))
		workers := map[string]bool{}
		for _, c := range got {
			workers[c.WorkerID] = true
		}
		require.Len(t, workers, 4, "each job got its own slot: %v", workers)
		got, err = b.store.ClaimAfter(ctx, []string{"u"}, slots("w", 2), ttl, cursor)
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = b.store.ClaimBefore(ctx, []string{"u"}, slots("w", 4), ttl, cursor)
		require.NoError(t, err)
		require.Equal(t, order[:1], claimedIDs(got), "the rescan finds it")
		got, err = b.store.Claim(ctx, []string{"u"}, slots("w", 2), ttl)
		require.NoError(t, err)
		require.Equal(t, order[1:2], claimedIDs(got), "the job at the cursor is neither before nor after it (its claim took it)")
	})

	t.Run("ResumingAMarginBeforeTheCursorTakesWhatCommittedLate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A job whose INSERT read its clock (submitted_at is the
		// transaction's now()) before the cursor's job was submitted, and
		// committed after the claim that took it.
		slow, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = slow.Rollback(ctx) }()
		var began time.Time
		require.NoError(t, slow.QueryRow(ctx, `SELECT now()`).Scan(&began))
		insertJobs(t, b, "late", 5, 3)
		first, err := b.store.Claim(ctx, []string{"late"}, slots("w", 3), ttl)
		require.NoError(t, err)
		require.Len(t, first, 3)
		cursor, _ := jobstore.LastClaimed(first)
		late := uuid.Must(uuid.NewV7())
		_, err = slow.Exec(ctx, `INSERT INTO jobs (id, topic, args, priority, max_attempts) VALUES ($1, 'late', '{}', 5, 3)`, late)
		require.NoError(t, err)
		require.NoError(t, slow.Commit(ctx))
		require.True(t, began.Before(cursor.SubmittedAt))

		got, err := b.store.ClaimAfter(ctx, []string{"late"}, slots("w", 3), ttl, cursor)
		require.NoError(t, err)
		require.Empty(t, got, "from the cursor itself it is not found")
		got, err = b.store.ClaimAfter(ctx, []string{"late"}, slots("w", 3), ttl, cursor.Back(time.Hour))
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{late}, claimedIDs(got), "a margin before it, it is")
	})

	t.Run("ClaimBeforeTakesWhatSortsBeforeTheCursorFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "v", 5, 6)
		order := pendingInDispatchOrder(t, b, "v")
		cursor := cursorOf(t, b, order[3])
		urgent := insertJobs(t, b, "v", 8, 1)
		// Higher priority first, then the cursor's priority up to it: the
		// cursor's own job (a job a claim took) is not before it.
		got, err := b.store.ClaimBefore(ctx, []string{"v"}, slots("w", 4), ttl, cursor)
		require.NoError(t, err)
		require.ElementsMatch(t, append(urgent, order[:3]...), claimedIDs(got))
		// Short before the cursor: the rest after it, never the job at it.
		got, err = b.store.ClaimBefore(ctx, []string{"v"}, slots("w", 5), ttl, cursor)
		require.NoError(t, err)
		require.ElementsMatch(t, order[4:], claimedIDs(got))
	})

	t.Run("TakesNothingOfAPausedScope", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "p", 5, 4)
		insertJobs(t, b, "q", 5, 4)
		order := pendingInDispatchOrder(t, b, "p")
		cursor := cursorOf(t, b, order[0])
		_, err := b.store.Pause(ctx, pauseReq("p", jobstore.PauseDrain, "resume test", "alice"))
		require.NoError(t, err)
		got, err := b.store.ClaimAfter(ctx, []string{"p", "q"}, slots("w", 2), ttl, cursor)
		require.NoError(t, err)
		more, err := b.store.ClaimBefore(ctx, []string{"p", "q"}, slots("w", 6), ttl, cursor)
		require.NoError(t, err)
		got = append(got, more...)
		require.Len(t, got, 4)
		for _, c := range got {
			require.Equal(t, "q", c.Topic)
		}
		_, err = b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, "resume test", "alice"))
		require.NoError(t, err)
		insertJobs(t, b, "q", 5, 4)
		got, err = b.store.ClaimAfter(ctx, []string{"p", "q"}, slots("w", 8), ttl, cursor)
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = b.store.ClaimBefore(ctx, []string{"p", "q"}, slots("w", 8), ttl, cursor)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("KeepsATopicLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 10)
		order := pendingInDispatchOrder(t, b, "lim")
		_, err := b.store.SetTopicLimit(ctx, "lim", ptr(3), "alice")
		require.NoError(t, err)
		got, err := b.store.ClaimAfter(ctx, []string{"lim"}, slots("w", 8), ttl, cursorOf(t, b, order[0]))
		require.NoError(t, err)
		require.Len(t, got, 3, "a limited topic is claimed within its limit")
		got, err = b.store.ClaimBefore(ctx, []string{"lim"}, slots("w", 8), ttl, cursorOf(t, b, order[9]))
		require.NoError(t, err)
		require.Empty(t, got, "a limited topic at its limit gives nothing")
	})

	// The reason for the cursor (ADR-0022): while any snapshot older than
	// the claims stays open, Postgres cannot mark the claimed rows' entries
	// in jobs_claim_idx dead, and a claim from the head steps over every
	// one of them. A claim resuming after its cursor does not, however many
	// there are. Counted in buffers, not timed.
	t.Run("AnOldSnapshotDoesNotLengthenItsWalk", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const batches, batch = 40, 100
		insertJobs(t, b, "old", 5, batches*batch+batch)
		_, err := b.pool.Exec(ctx, `ANALYZE jobs`)
		require.NoError(t, err)

		// Another session's snapshot, open from here to the end.
		held, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer held.Rollback(ctx) //nolint:errcheck // the rollback at the end of the test only releases the transaction
		_, err = held.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
		require.NoError(t, err)
		var n int
		require.NoError(t, held.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n))

		var cursor jobstore.ClaimCursor
		for range batches {
			got, err := b.store.Claim(ctx, []string{"old"}, slots("w", batch), ttl)
			require.NoError(t, err)
			require.Len(t, got, batch)
			cursor, _ = jobstore.LastClaimed(got)
		}
		args := []any{[]string{"old"}, batch, slots("w", batch), "30 seconds"}
		head := claimIndexBuffers(t, b, jobstore.ClaimSQL, args...)
		resumed := claimIndexBuffers(t, b, jobstore.ClaimAfterSQL, append(args, cursor.Priority, cursor.SubmittedAt, [16]byte(cursor.ID))...)
		t.Logf("jobs_claim_idx walk after %d claimed rows under an old snapshot: %d buffers from the head, %d resuming", batches*batch, head, resumed)
		require.LessOrEqual(t, resumed, 20, "resuming reads the next batch's index and heap pages only")
		require.Greater(t, head, 3*resumed, "the test's premise: from the head, the walk steps over every claimed row's entry")
	})
}

// cursorOf is the cursor at job id.
func cursorOf(t *testing.T, b *testBundle, id uuid.UUID) jobstore.ClaimCursor {
	t.Helper()
	c := jobstore.ClaimCursor{ID: id}
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT priority, submitted_at FROM jobs WHERE id = $1`, id).Scan(&c.Priority, &c.SubmittedAt))
	return c
}

// claimIndexBuffers is the buffers of sql's (a claim statement's) walks
// of jobs_claim_idx, of which there must be some.
func claimIndexBuffers(t *testing.T, b *testBundle, sql string, args ...any) int {
	t.Helper()
	buffers, walks := indexWalkBuffers(t, b, sql, "jobs_claim_idx", args...)
	require.Positive(t, walks, "no walk of jobs_claim_idx")
	return buffers
}

// indexWalkBuffers runs sql under EXPLAIN ANALYZE in a transaction it
// rolls back, under the store's plan settings, and returns the shared
// buffers its index scans of index touched (index and heap pages) and how
// many scans of it the plan has.
func indexWalkBuffers(t *testing.T, b *testBundle, sql, index string, args ...any) (buffers, walks int) {
	t.Helper()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // the rollback at the end of the test only releases the transaction
	_, err = tx.Exec(ctx, jobstore.PinnedPlanSQL)
	require.NoError(t, err)
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&raw))
	var parsed []struct {
		Plan bufferNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(raw, &parsed))
	return parsed[0].Plan.indexBuffers(index)
}

type bufferNode struct {
	NodeType  string       `json:"Node Type"`
	IndexName string       `json:"Index Name"`
	Hit       int          `json:"Shared Hit Blocks"`
	Read      int          `json:"Shared Read Blocks"`
	Plans     []bufferNode `json:"Plans"`
}

// indexBuffers sums the buffers of the index scans of index under n.
func (n bufferNode) indexBuffers(index string) (buffers, walks int) {
	if n.NodeType == "Index Scan" && n.IndexName == index {
		buffers, walks = n.Hit+n.Read, 1
	}
	for _, c := range n.Plans {
		b, w := c.indexBuffers(index)
		buffers, walks = buffers+b, walks+w
	}
	return buffers, walks
}
