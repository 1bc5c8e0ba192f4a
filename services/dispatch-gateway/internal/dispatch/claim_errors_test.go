package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/gwmetrics"
)

type claimCall struct {
	topics, slots []string
	jobs          int
	err           error
	at            time.Time // when the statement returned
}

// recordingClaimer runs every claim against the real store, except that
// fail (when set) may turn a claim into an error before it reaches the
// database; it records every call in order.
type recordingClaimer struct {
	store *jobstore.Store
	fail  func(topics, slots []string) error

	mu    sync.Mutex
	calls []claimCall
}

func (c *recordingClaimer) Claim(ctx context.Context, topics, slots []string, ttl time.Duration) ([]pulsetype.Claimed, error) {
	return c.claim(topics, slots, func() ([]pulsetype.Claimed, error) { return c.store.Claim(ctx, topics, slots, ttl) })
}

func (c *recordingClaimer) ClaimAfter(ctx context.Context, topics, slots []string, ttl time.Duration, after jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	return c.claim(topics, slots, func() ([]pulsetype.Claimed, error) { return c.store.ClaimAfter(ctx, topics, slots, ttl, after) })
}

func (c *recordingClaimer) ClaimBefore(ctx context.Context, topics, slots []string, ttl time.Duration, at jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	return c.claim(topics, slots, func() ([]pulsetype.Claimed, error) { return c.store.ClaimBefore(ctx, topics, slots, ttl, at) })
}

func (c *recordingClaimer) claim(topics, slots []string, run func() ([]pulsetype.Claimed, error)) ([]pulsetype.Claimed, error) {
	var claimed []pulsetype.Claimed
	var err error
	if c.fail != nil {
		err = c.fail(topics, slots)
	}
	if err == nil {
		claimed, err = run()
	}
	c.mu.Lock()
	c.calls = append(c.calls, claimCall{slices.Clone(topics), slices.Clone(slots), len(claimed), err, time.Now()})
	c.mu.Unlock()
	return claimed, err
}

func (c *recordingClaimer) log() []claimCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

type errorsBundle struct {
	store   *jobstore.Store
	claimer *recordingClaimer
	metrics *gwmetrics.Metrics
	d       *dispatch.Dispatcher
}

// setupWithMetrics starts a dispatcher that only the test wakes (the poll
// tick is an hour away), observed by the gateway's real metrics.
func setupWithMetrics(t *testing.T, fail func(topics, slots []string) error, ddl ...string) *errorsBundle {
	t.Helper()
	store := jobstore.New(pgtest.Pool(t))
	for _, stmt := range ddl {
		_, err := store.Pool().Exec(t.Context(), stmt)
		require.NoError(t, err)
	}
	claimer := &recordingClaimer{store: store, fail: fail}
	d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: time.Hour, Batch: 50},
		claimer, nil, slog.New(slog.NewTextHandler(testWriter(t), nil)))
	m := gwmetrics.New(prometheus.NewRegistry(), d.Registry().Stats)
	d.SetObserver(m)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &errorsBundle{store: store, claimer: claimer, metrics: m, d: d}
}

// addIdle registers workers and waits until the dispatcher has found
// nothing for each of their groups, so what follows starts from quiet.
func (b *errorsBundle) addIdle(t *testing.T, workers map[string][]string, slots int) map[string]*dispatch.Worker {
	t.Helper()
	out := map[string]*dispatch.Worker{}
	for id, topics := range workers {
		out[id] = b.d.Registry().Add(id, topics, slots)
	}
	require.Eventually(t, func() bool {
		seen := map[string]bool{}
		for _, c := range b.claimer.log() {
			seen[c.slots[0]] = true
		}
		return len(seen) == len(workers)
	}, 10*time.Second, 5*time.Millisecond)
	return out
}

func (b *errorsBundle) errorsByReason(reason string) float64 {
	return testutil.ToFloat64(b.metrics.ClaimErrorsByReason.WithLabelValues(reason))
}

// collect gathers jobs from w's outbox until it holds n.
func collect(t *testing.T, w *dispatch.Worker, n int) {
	t.Helper()
	got := 0
	require.Eventually(t, func() bool { got += len(w.TakeOutbox()); return got >= n }, 10*time.Second, 5*time.Millisecond,
		"worker %s got %d jobs, want %d", w.ID, got, n)
	require.Equal(t, n, got, "worker %s", w.ID)
}

// requireBackoff checks that failures (statement end times) are spaced by
// a backoff that starts at 100 ms and doubles.
func requireBackoff(t *testing.T, failures []time.Time) {
	t.Helper()
	for i := 1; i < len(failures); i++ {
		gap := failures[i].Sub(failures[i-1])
		require.GreaterOrEqual(t, gap, 100*time.Millisecond<<(i-1), "gap %d between failed claims", i)
	}
}

func TestClaimErrorsCostOnlyTheirOwnGroup(t *testing.T) {
	t.Parallel()

	// One row that the claim can move to RUNNING only in violation of a
	// constraint fails every claim statement reaching it. Its topic backs
	// off — in every group that has it — and every other group and topic
	// is served in the same pass.
	t.Run("APoisonedRowBacksOffItsTopicAlone", func(t *testing.T) {
		t.Parallel()
		b := setupWithMetrics(t, nil,
			`ALTER TABLE jobs ADD CONSTRAINT test_poison_cannot_run CHECK (topic <> 'poison' OR status <> 'RUNNING') NOT VALID`)
		// Groups in claim order: a, a+poison, b, poison.
		ws := b.addIdle(t, map[string][]string{
			"wA": {"a"}, "wAP": {"a", "poison"}, "wB": {"b"}, "wP": {"poison"},
		}, 2)
		quiet := len(b.claimer.log())
		// The poisoned row first, so the a+poison claim reaches it.
		insertJobs(t, b.store, "poison", 1)
		insertJobs(t, b.store, "a", 4)
		insertJobs(t, b.store, "b", 2)
		b.d.JobsReady()

		collect(t, ws["wA"], 2)
		collect(t, ws["wAP"], 2) // a's jobs, claimed topic by topic after its group's claim failed
		collect(t, ws["wB"], 2)

		// The same pass went on after the failure: from the group claim
		// that failed to the claim that served b, the only statements were
		// the failed group's own topic-by-topic claims.
		calls := b.claimer.log()[quiet:]
		failed := slices.IndexFunc(calls, func(c claimCall) bool { return c.err != nil })
		require.GreaterOrEqual(t, failed, 0)
		require.Equal(t, []string{"a", "poison"}, calls[failed].topics)
		require.Equal(t, dispatch.ClaimErrorData, dispatch.ClaimErrorReason(calls[failed].err))
		served := slices.IndexFunc(calls, func(c claimCall) bool { return c.topics[0] == "b" && c.jobs == 2 })
		require.Greater(t, served, failed)
		for _, c := range calls[failed+1 : served] {
			require.Len(t, c.topics, 1)
			require.Equal(t, "wAP", c.slots[0], "only the failed group's split claims come between")
		}

		// The poisoned topic keeps being retried, alone, further apart
		// each time; nothing else fails, and every failure is counted.
		var poisonFailures []time.Time
		require.Eventually(t, func() bool {
			poisonFailures = poisonFailures[:0]
			for _, c := range b.claimer.log()[quiet:] {
				if c.err != nil && slices.Equal(c.topics, []string{"poison"}) {
					poisonFailures = append(poisonFailures, c.at)
				}
			}
			return len(poisonFailures) >= 4
		}, 10*time.Second, 10*time.Millisecond)
		requireBackoff(t, poisonFailures)
		failures := 0
		for _, c := range b.claimer.log()[quiet:] {
			if c.err != nil {
				require.Contains(t, c.topics, "poison")
				failures++
			}
		}
		require.Eventually(t, func() bool { return b.errorsByReason("data") >= float64(failures) }, 5*time.Second, 5*time.Millisecond)
		require.Zero(t, b.errorsByReason("unavailable"))
		require.Zero(t, b.errorsByReason("other"))
		require.Empty(t, ws["wP"].TakeOutbox())

		var pending int
		require.NoError(t, b.store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE topic = 'poison' AND status = 'PENDING'`).Scan(&pending))
		require.Equal(t, 1, pending)

		// Once the row is gone the topic is served again.
		_, err := b.store.Pool().Exec(t.Context(), `ALTER TABLE jobs DROP CONSTRAINT test_poison_cannot_run`)
		require.NoError(t, err)
		collect(t, ws["wP"], 1)
	})

	// A group whose claim fails for a reason that is no topic's fault (here
	// the database unreachable, injected for that group only) backs off as
	// a whole; the pass goes on to the next group.
	t.Run("AFailingGroupBacksOffAloneAndThePassGoesOn", func(t *testing.T) {
		t.Parallel()
		var broken sync.Map
		b := setupWithMetrics(t, func(_, slots []string) error {
			if _, ok := broken.Load(slots[0]); ok {
				return apierr.Unavailable("claim: database unreachable", errors.New("connection refused"))
			}
			return nil
		})
		// Claim order: x before y.
		ws := b.addIdle(t, map[string][]string{"wX": {"x"}, "wY": {"y"}}, 2)
		broken.Store("wX", true)
		quiet := len(b.claimer.log())
		insertJobs(t, b.store, "x", 2)
		insertJobs(t, b.store, "y", 2)
		b.d.JobsReady()
		collect(t, ws["wY"], 2)

		var xFailures []time.Time
		require.Eventually(t, func() bool {
			xFailures = xFailures[:0]
			for _, c := range b.claimer.log()[quiet:] {
				if c.err != nil {
					require.Equal(t, []string{"x"}, c.topics)
					xFailures = append(xFailures, c.at)
				}
			}
			return len(xFailures) >= 4
		}, 10*time.Second, 10*time.Millisecond)
		requireBackoff(t, xFailures)
		require.Eventually(t, func() bool { return b.errorsByReason("unavailable") >= 4 }, 5*time.Second, 5*time.Millisecond)
		require.Zero(t, b.errorsByReason("data"))

		broken.Delete("wX")
		collect(t, ws["wX"], 2)
	})
}

// Errors are classified by what Postgres said, through the store's typed
// errors.
func TestClaimErrorReason(t *testing.T) {
	t.Parallel()
	require.Equal(t, dispatch.ClaimErrorUnavailable, dispatch.ClaimErrorReason(apierr.Unavailable("claim", errors.New("x"))))
	require.Equal(t, dispatch.ClaimErrorOther, dispatch.ClaimErrorReason(fmt.Errorf("claim: %w", context.DeadlineExceeded)))
}
