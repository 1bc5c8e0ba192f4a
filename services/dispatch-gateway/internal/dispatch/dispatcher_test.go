package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// countingClaimer counts claim statements issued against the real store.
type countingClaimer struct {
	store *jobstore.Store
	calls atomic.Int64
}

func (c *countingClaimer) Claim(ctx context.Context, topics, slots []string, ttl time.Duration) ([]pulsetype.Claimed, error) {
	c.calls.Add(1)
	return c.store.Claim(ctx, topics, slots, ttl)
}

func (c *countingClaimer) ClaimBefore(ctx context.Context, topics, slots []string, ttl time.Duration, at jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	c.calls.Add(1)
	return c.store.ClaimBefore(ctx, topics, slots, ttl, at)
}

func (c *countingClaimer) ClaimAfter(ctx context.Context, topics, slots []string, ttl time.Duration, after jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	c.calls.Add(1)
	return c.store.ClaimAfter(ctx, topics, slots, ttl, after)
}

type dispatcherBundle struct {
	store   *jobstore.Store
	claimer *countingClaimer
	d       *dispatch.Dispatcher
}

func setupDispatcher(t *testing.T, poll time.Duration) *dispatcherBundle {
	t.Helper()
	store := jobstore.New(pgtest.Pool(t))
	claimer := &countingClaimer{store: store}
	d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: poll, Batch: 50},
		claimer, nil, slog.New(slog.NewTextHandler(testWriter(t), nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &dispatcherBundle{store: store, claimer: claimer, d: d}
}

func insertJobs(t *testing.T, store *jobstore.Store, topic string, n int) {
	t.Helper()
	jobs := make([]pulsetype.NewJob, n)
	for i := range jobs {
		jobs[i] = pulsetype.NewJob{ID: uuid.Must(uuid.NewV7()), Topic: topic, Args: []byte(`{}`), Priority: 5, MaxAttempts: 3}
	}
	_, err := store.Insert(t.Context(), jobs)
	require.NoError(t, err)
}

func TestDispatcher(t *testing.T) {
	t.Parallel()

	t.Run("NeverSendsAWorkerMoreThanItsFreeSlots", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t, time.Hour)
		insertJobs(t, b.store, "t", 60)
		const workers, concurrency = 3, 2
		var mu sync.Mutex
		seen := map[uuid.UUID]bool{}
		var wg sync.WaitGroup
		deadline := time.Now().Add(proctest.Patience)
		for i := range workers {
			w := b.d.Registry().Add(string(rune('a'+i)), []string{"t"}, concurrency)
			wg.Add(1)
			go func() {
				defer wg.Done()
				held := 0
				for {
					mu.Lock()
					done := len(seen) == 60
					mu.Unlock()
					if done {
						return
					}
					if time.Now().After(deadline) {
						mu.Lock()
						n := len(seen)
						mu.Unlock()
						t.Errorf("worker %s gave up after %s with %d of 60 jobs delivered: slots were lost", w.ID, proctest.Patience, n)
						return
					}
					select {
					case <-w.Ready():
					case <-time.After(50 * time.Millisecond):
						continue
					}
					jobs := w.TakeOutbox()
					held += len(jobs)
					if held > concurrency {
						t.Errorf("worker %s holds %d jobs with concurrency %d", w.ID, held, concurrency)
					}
					mu.Lock()
					for _, j := range jobs {
						if seen[j.ID] {
							t.Errorf("job %s delivered twice", j.ID)
						}
						seen[j.ID] = true
					}
					mu.Unlock()
					held -= len(jobs)
					b.d.Registry().Credit(w, len(jobs)) // "ran" them
				}
			}()
		}
		b.d.JobsReady()
		wg.Wait()
		require.Len(t, seen, 60)
	})

	t.Run("IdleWorkersCauseNoClaimsBetweenNotifications", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t, time.Hour)
		ws := make([]*dispatch.Worker, 100)
		for i := range ws {
			ws[i] = b.d.Registry().Add(uuid.NewString(), []string{"t"}, 4)
		}
		b.d.JobsReady()
		require.Eventually(t, func() bool { return b.claimer.calls.Load() >= 1 }, 10*time.Second, 5*time.Millisecond)
		settled := b.claimer.calls.Load()
		for _, w := range ws {
			b.d.Registry().Credit(w, 1)
		}
		// A notification after the credits proves the loop was awake and
		// idle: exactly one more claim, not one per credit.
		b.d.JobsReady()
		require.Eventually(t, func() bool { return b.claimer.calls.Load() >= settled+1 }, 10*time.Second, 5*time.Millisecond)
		insertJobs(t, b.store, "t", 1)
		b.d.JobsReady()
		require.Eventually(t, func() bool {
			for _, w := range ws {
				if len(w.TakeOutbox()) == 1 {
					return true
				}
			}
			return false
		}, 10*time.Second, 5*time.Millisecond)
		require.LessOrEqual(t, b.claimer.calls.Load(), settled+2, "idle credits must not trigger claims")
	})

	t.Run("PollFindsJobsWithoutANotification", func(t *testing.T) {
		t.Parallel()
		b := setupDispatcher(t, 20*time.Millisecond)
		w := b.d.Registry().Add("w", []string{"t"}, 5)
		insertJobs(t, b.store, "t", 3)
		got := 0
		require.Eventually(t, func() bool { got += len(w.TakeOutbox()); return got == 3 }, 10*time.Second, 5*time.Millisecond)
	})
}

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func testWriter(t *testing.T) io.Writer { return tlog{t} }
