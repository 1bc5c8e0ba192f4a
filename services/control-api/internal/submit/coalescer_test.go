package submit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit/submittest"
)

type testBundle struct {
	store     *jobstore.Store
	gate      *submittest.Gate
	coalescer *submit.Coalescer
}

func setup(t *testing.T, flushers int) *testBundle {
	t.Helper()
	store := jobstore.New(pgtest.Pool(t))
	gate := submittest.NewGate()
	c := submit.NewCoalescer(gate.Wrap(store), submit.Options{MaxBatch: 1000, Flushers: flushers})
	t.Cleanup(func() {
		gate.Open()
		require.NoError(t, c.Close(context.Background()))
	})
	return &testBundle{store: store, gate: gate, coalescer: c}
}

func (b *testBundle) open() { b.gate.Open() }

func (b *testBundle) countJobs(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM jobs`).Scan(&n))
	return n
}

func newJob(key string) pulsetype.NewJob {
	return pulsetype.NewJob{
		ID:             uuid.Must(uuid.NewV7()),
		Topic:          "coalesce.test",
		Args:           []byte(`{}`),
		Priority:       5,
		MaxAttempts:    3,
		IdempotencyKey: key,
	}
}

// newJobs is n jobs without idempotency keys.
func newJobs(n int) []pulsetype.NewJob {
	jobs := make([]pulsetype.NewJob, n)
	for i := range jobs {
		jobs[i] = newJob("")
	}
	return jobs
}

type outcome struct {
	job pulsetype.NewJob
	ins pulsetype.Inserted
	err error
}

// submitAll submits jobs from one goroutine each and collects the outcomes.
func submitAll(ctx context.Context, c *submit.Coalescer, jobs []pulsetype.NewJob) <-chan []outcome {
	done := make(chan []outcome, 1)
	go func() {
		out := make([]outcome, len(jobs))
		var wg sync.WaitGroup
		for i, j := range jobs {
			wg.Go(func() {
				ins, err := c.Submit(ctx, j)
				out[i] = outcome{job: j, ins: ins, err: err}
			})
		}
		wg.Wait()
		done <- out
	}()
	return done
}

func TestCoalescer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const submitters = 50

	t.Run("ConcurrentSubmitsAllLandEachWithItsOwnID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4)
		b.open()
		jobs := newJobs(submitters)
		seen := map[uuid.UUID]bool{}
		for _, o := range <-submitAll(ctx, b.coalescer, jobs) {
			require.NoError(t, o.err)
			require.Equal(t, o.job.ID, o.ins.ID, "each waiter gets its own job's id")
			require.False(t, o.ins.Duplicate)
			seen[o.ins.ID] = true
		}
		require.Len(t, seen, submitters)
		require.Equal(t, submitters, b.countJobs(t))
		st := b.coalescer.Stats()
		require.EqualValues(t, submitters, st.Submits)
		require.LessOrEqual(t, st.Statements, int64(submitters))
	})

	t.Run("ConcurrentSubmitsShareInsertStatements", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4)
		jobs := newJobs(submitters)
		results := submitAll(ctx, b.coalescer, jobs)
		// At most 4 flushers hold a batch at the shut gate; everything else
		// queues behind them and goes out in one more statement.
		submittest.Wait(t, b.coalescer, "every submitter accepted", func(s submit.Stats) bool { return s.Submits == submitters })
		b.open()
		for _, o := range <-results {
			require.NoError(t, o.err)
			require.Equal(t, o.job.ID, o.ins.ID)
		}
		require.Equal(t, submitters, b.countJobs(t))
		st := b.coalescer.Stats()
		require.Less(t, st.Statements, int64(submitters), "submits were coalesced")
		require.LessOrEqual(t, st.Statements, int64(4+1))
	})

	t.Run("DuplicateIdempotencyKeysResolveToTheSameJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 4)
		jobs := make([]pulsetype.NewJob, submitters)
		for i := range jobs {
			jobs[i] = newJob(fmt.Sprintf("key-%d", i%5))
		}
		results := submitAll(ctx, b.coalescer, jobs)
		submittest.Wait(t, b.coalescer, "every submitter accepted", func(s submit.Stats) bool { return s.Submits == submitters })
		b.open()
		byKey := map[string]uuid.UUID{}
		fresh := map[string]int{}
		for _, o := range <-results {
			require.NoError(t, o.err)
			key := o.job.IdempotencyKey
			if id, ok := byKey[key]; ok {
				require.Equal(t, id, o.ins.ID, "every submit of %s gets one job", key)
			}
			byKey[key] = o.ins.ID
			if !o.ins.Duplicate {
				fresh[key]++
			}
		}
		require.Len(t, byKey, 5)
		for key, n := range fresh {
			require.Equal(t, 1, n, "exactly one submit of %s enqueued", key)
		}
		require.Equal(t, 5, b.countJobs(t))
	})

	t.Run("ARowTheDatabaseRefusesFailsAloneNotItsBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		first := submitAll(ctx, b.coalescer, []pulsetype.NewJob{newJob("")})
		// The only flusher now holds the first job at the gate; the next
		// four queue up and will share one INSERT.
		submittest.Wait(t, b.coalescer, "the first submit taken by a flusher", func(s submit.Stats) bool { return s.Submits == 1 && s.Queued == 0 })
		bad := newJob("")
		bad.Priority = 99 // bypasses validation; the CHECK refuses it
		batch := []pulsetype.NewJob{newJob(""), bad, newJob(""), newJob("")}
		rest := submitAll(ctx, b.coalescer, batch)
		submittest.Wait(t, b.coalescer, "the batch queued", func(s submit.Stats) bool { return s.Queued == len(batch) })
		b.open()

		require.NoError(t, (<-first)[0].err)
		for _, o := range <-rest {
			if o.job.ID == bad.ID {
				require.ErrorIs(t, o.err, apierr.ErrInvalidArgument)
				require.Equal(t, "priority", apierr.FieldOf(o.err))
				continue
			}
			require.NoError(t, o.err)
			require.Equal(t, o.job.ID, o.ins.ID)
		}
		require.Equal(t, 4, b.countJobs(t))
		// first alone, then the refused batch, which the store split.
		require.EqualValues(t, 2, b.coalescer.Stats().Statements)
	})

	t.Run("ACanceledCallerReturnsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		cctx, cancel := context.WithCancel(ctx)
		res := submitAll(cctx, b.coalescer, []pulsetype.NewJob{newJob("")})
		submittest.Wait(t, b.coalescer, "the submit accepted", func(s submit.Stats) bool { return s.Submits == 1 })
		cancel()
		require.ErrorIs(t, (<-res)[0].err, context.Canceled)
	})

	t.Run("CloseInsertsEverySubmitAlreadyAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		jobs := newJobs(10)
		results := submitAll(ctx, b.coalescer, jobs)
		submittest.Wait(t, b.coalescer, "10 submits accepted", func(s submit.Stats) bool { return s.Submits == 10 })
		closed := make(chan error, 1)
		go func() { closed <- b.coalescer.Close(ctx) }()
		b.open()
		require.NoError(t, <-closed)
		require.Equal(t, 10, b.countJobs(t), "nothing accepted is lost")
		for _, o := range <-results {
			require.NoError(t, o.err)
		}

		_, err := b.coalescer.Submit(ctx, newJob(""))
		require.ErrorIs(t, err, apierr.ErrUnavailable, "a submit after Close is refused")
	})

	t.Run("CloseCutShortAnswersEveryWaiterAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		jobs := newJobs(5)
		results := submitAll(ctx, b.coalescer, jobs)
		submittest.Wait(t, b.coalescer, "5 submits accepted", func(s submit.Stats) bool { return s.Submits == 5 })
		expired, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, b.coalescer.Close(expired), context.Canceled)
		for _, o := range <-results {
			require.ErrorIs(t, o.err, apierr.ErrUnavailable, "every waiter is answered")
		}
		require.Zero(t, b.countJobs(t))
	})
}
