package jobstore_test

import (
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// graphJobs are n jobs of topic, job i depending on the jobs deps[i]
// names by index, in one workflow (the first job's id).
func graphJobs(topic string, n int, deps map[int][]int) []pulsetype.NewJob {
	jobs := make([]pulsetype.NewJob, n)
	for i := range jobs {
		jobs[i] = newJob(topic, 5)
	}
	for i := range jobs {
		for _, p := range deps[i] {
			jobs[i].DependsOn = append(jobs[i].DependsOn, pulsetype.Dependency{Parent: jobs[p].ID, OnParentFailure: pulsetype.OnParentFailureCancel})
		}
		jobs[i].WorkflowID = jobs[0].ID
	}
	return jobs
}

// claimExactly claims jobs of topic as worker "w" and fails the test
// unless it gets exactly the ids given (in any order).
func claimExactly(t *testing.T, store *jobstore.Store, topic string, want ...uuid.UUID) []pulsetype.Claimed {
	t.Helper()
	slots := make([]string, len(want)+1)
	for i := range slots {
		slots[i] = "w"
	}
	claimed, err := store.Claim(ctx, []string{topic}, slots, time.Minute)
	require.NoError(t, err)
	got := make([]uuid.UUID, len(claimed))
	for i, c := range claimed {
		got[i] = c.ID
	}
	require.ElementsMatch(t, want, got)
	return claimed
}

func completeWith(t *testing.T, store *jobstore.Store, worker string, c pulsetype.Claimed, result string) {
	t.Helper()
	acks, err := store.Report(ctx, worker, []pulsetype.Result{{
		Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: pulsetype.OutcomeComplete, Worker: worker, Result: []byte(result),
	}})
	require.NoError(t, err)
	require.True(t, acks[0].Accepted, acks[0].Reason)
}

// A diamond (A -> B, C -> D) submitted in one call runs in its order, and
// D reads B's and C's results, only while it holds its attempt.
func TestInsertGraphDiamond(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	jobs := graphJobs("diamond", 4, map[int][]int{1: {0}, 2: {0}, 3: {1, 2}})
	ins, err := store.InsertGraph(ctx, jobs)
	require.NoError(t, err)
	for i := range jobs {
		require.Equal(t, pulsetype.Inserted{ID: jobs[i].ID}, ins[i])
	}
	d, err := store.Get(ctx, jobs[3].ID)
	require.NoError(t, err)
	require.EqualValues(t, 2, d.BlockedBy)
	require.Equal(t, jobs[0].ID, *d.WorkflowID)

	a := claimExactly(t, store, "diamond", jobs[0].ID)
	completeWith(t, store, "w", a[0], `"a"`)
	bc := claimExactly(t, store, "diamond", jobs[1].ID, jobs[2].ID)
	for _, c := range bc {
		completeWith(t, store, "w", c, strconv.Quote(c.ID.String()[:8]))
	}
	dd := claimExactly(t, store, "diamond", jobs[3].ID)

	ref := pulsetype.AttemptRef{ID: dd[0].ID, Attempt: dd[0].Attempt}
	parents, ok, err := store.ParentResults(ctx, "w", ref)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, parents, 2)
	for _, p := range parents {
		require.Contains(t, []uuid.UUID{jobs[1].ID, jobs[2].ID}, p.ID)
		require.Equal(t, pulsetype.StatusCompleted, p.Status)
		require.Equal(t, strconv.Quote(p.ID.String()[:8]), string(p.Result))
		require.NotNil(t, p.FinishedAt)
	}

	for name, tc := range map[string]struct {
		worker string
		ref    pulsetype.AttemptRef
	}{
		"AnotherWorker":  {"intruder", ref},
		"AStaleAttempt":  {"w", pulsetype.AttemptRef{ID: ref.ID, Attempt: ref.Attempt - 1}},
		"AnotherJob":     {"w", pulsetype.AttemptRef{ID: jobs[0].ID, Attempt: 1}},
		"AJobThatIsNone": {"w", pulsetype.AttemptRef{ID: uuid.Must(uuid.NewV7()), Attempt: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			parents, ok, err := store.ParentResults(ctx, tc.worker, tc.ref)
			require.NoError(t, err)
			require.False(t, ok)
			require.Empty(t, parents)
		})
	}
}

// A parent id that names no job is refused naming the field, and nothing
// of the call is written.
func TestInsertGraphRefusesAnUnknownParent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	jobs := graphJobs("unknown", 2, map[int][]int{1: {0}})
	jobs[1].DependsOn = append(jobs[1].DependsOn, pulsetype.Dependency{Parent: uuid.Must(uuid.NewV7())})
	_, err := store.InsertGraph(ctx, jobs)
	var member *jobstore.MemberError
	require.True(t, errors.As(err, &member), "%v", err)
	require.Equal(t, 1, member.Index)
	var ae *apierr.Error
	require.True(t, errors.As(err, &ae))
	require.Equal(t, "depends_on[1]", ae.Field)
	require.Zero(t, countJobs(t, pool))
}

// Submitting the same graph again with its idempotency keys answers the
// jobs already there, and writes no second edge.
func TestInsertGraphIsIdempotentByKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	first := graphJobs("idem", 2, map[int][]int{1: {0}})
	first[0].IdempotencyKey, first[1].IdempotencyKey = "wf-1/a", "wf-1/b"
	_, err := store.InsertGraph(ctx, first)
	require.NoError(t, err)

	again := graphJobs("idem", 2, map[int][]int{1: {0}})
	again[0].IdempotencyKey, again[1].IdempotencyKey = "wf-1/a", "wf-1/b"
	ins, err := store.InsertGraph(ctx, again)
	require.NoError(t, err)
	require.Equal(t, []pulsetype.Inserted{{ID: first[0].ID, Duplicate: true}, {ID: first[1].ID, Duplicate: true}}, ins)
	var edges int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM job_dependencies`).Scan(&edges))
	require.Equal(t, 1, edges)
	require.Equal(t, 2, countJobs(t, pool))
}

// fanSize is the width of the fan-in and fan-out below:
// PULSE_TEST_FAN_SIZE, 1,000 by default (make test stays lean; run it
// with 10000 to see the 10,000-job figures in docs/workflows.md).
func fanSize(t *testing.T) int {
	t.Helper()
	n := 1000
	if v := os.Getenv("PULSE_TEST_FAN_SIZE"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "PULSE_TEST_FAN_SIZE")
		require.Positive(t, n, "PULSE_TEST_FAN_SIZE")
	}
	return n
}

// A fan-in (one child waiting for N parents) and a fan-out (N children of
// one parent) submit and settle with no step that grows faster than N:
// the child's blocked_by is decremented once per parent's settle, and the
// parent's settle releases its N children in one UPDATE. The test logs
// the counts and times (docs/workflows.md); it asserts the outcome.
func TestFanInAndFanOut(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	n := fanSize(t)
	const batch = 500

	t.Run("FanIn", func(t *testing.T) {
		parents := make([]int, n)
		for i := range parents {
			parents[i] = i
		}
		jobs := graphJobs("fanin", n+1, map[int][]int{n: parents})
		start := time.Now()
		_, err := store.InsertGraph(ctx, jobs)
		require.NoError(t, err)
		submitted := time.Since(start)
		child, err := store.Get(ctx, jobs[n].ID)
		require.NoError(t, err)
		require.EqualValues(t, n, child.BlockedBy)

		start = time.Now()
		var settles int
		for done := 0; done < n; {
			slots := make([]string, min(batch, n-done))
			for i := range slots {
				slots[i] = "w"
			}
			claimed, err := store.Claim(ctx, []string{"fanin"}, slots, time.Minute)
			require.NoError(t, err)
			require.NotEmpty(t, claimed)
			results := make([]pulsetype.Result, len(claimed))
			for i, c := range claimed {
				require.NotEqual(t, jobs[n].ID, c.ID, "the child ran before its parents finished")
				results[i] = pulsetype.Result{Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: pulsetype.OutcomeComplete, Worker: "w"}
			}
			_, err = store.Report(ctx, "w", results)
			require.NoError(t, err)
			done += len(claimed)
			settles++
		}
		settled := time.Since(start)
		claimExactly(t, store, "fanin", jobs[n].ID)
		t.Logf("fan-in of %d parents: submit %v; %d parents claimed and settled in %d reports of up to %d in %v (%v per parent); the child then claimable",
			n, submitted.Round(time.Millisecond), n, settles, batch, settled.Round(time.Millisecond), (settled / time.Duration(n)).Round(time.Microsecond))
	})

	t.Run("FanOut", func(t *testing.T) {
		deps := make(map[int][]int, n)
		for i := 1; i <= n; i++ {
			deps[i] = []int{0}
		}
		jobs := graphJobs("fanout", n+1, deps)
		start := time.Now()
		_, err := store.InsertGraph(ctx, jobs)
		require.NoError(t, err)
		submitted := time.Since(start)

		parent := claimExactly(t, store, "fanout", jobs[0].ID)
		start = time.Now()
		completeWith(t, store, "w", parent[0], `{}`)
		settled := time.Since(start)
		var released int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE topic = 'fanout' AND status = 'PENDING' AND blocked_by = 0`).Scan(&released))
		require.Equal(t, n, released)
		t.Logf("fan-out of %d children: submit %v; the parent's settle released all %d in %v", n, submitted.Round(time.Millisecond), n, settled.Round(time.Millisecond))
	})
}
