package dispatch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// queueClaimer stands in for a queue that holds `backlog` claimable jobs:
// each claim takes as many as it asks for while any are left. It records
// each claim's size. (The claim statement itself is tested against
// Postgres in jobstore; this drives only the loop's timing.)
type queueClaimer struct {
	mu      sync.Mutex
	backlog int
	sizes   []int
	// froms holds, per claim, where it started: "head", or "after" or
	// "before" and the cursor.
	froms []claimedFrom
	taken int
	// during, when set, runs inside each claim, as handlers finishing
	// while a claim statement runs would.
	during func()
	// rescanCost is how long a rescan (ClaimBefore) takes, as a walk over
	// what an old snapshot keeps would; rescanErr, when set, is what it
	// returns.
	rescanCost time.Duration
	rescanErr  error
	// afterEmpty makes ClaimAfter find nothing: what is left sorts
	// before the cursor (a released child, a retried job).
	afterEmpty bool
}

type claimedFrom struct {
	from string
	at   jobstore.ClaimCursor
}

func (q *queueClaimer) Claim(_ context.Context, _, slots []string, _ time.Duration) ([]pulsetype.Claimed, error) {
	return q.take(slots, claimedFrom{from: "head"}), nil
}

func (q *queueClaimer) ClaimAfter(_ context.Context, _, slots []string, _ time.Duration, after jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	q.mu.Lock()
	empty := q.afterEmpty
	q.mu.Unlock()
	if empty {
		return q.take(nil, claimedFrom{"after", after}), nil
	}
	return q.take(slots, claimedFrom{"after", after}), nil
}

func (q *queueClaimer) ClaimBefore(_ context.Context, _, slots []string, _ time.Duration, at jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	q.mu.Lock()
	cost, err := q.rescanCost, q.rescanErr
	q.mu.Unlock()
	time.Sleep(cost)
	if err != nil {
		q.mu.Lock()
		q.froms = append(q.froms, claimedFrom{"before", at})
		q.mu.Unlock()
		return nil, err
	}
	return q.take(slots, claimedFrom{"before", at}), nil
}

// take hands out jobs in dispatch order: the n-th job ever taken was
// submitted n µs after the epoch.
func (q *queueClaimer) take(slots []string, from claimedFrom) []pulsetype.Claimed {
	q.mu.Lock()
	during := q.during
	q.mu.Unlock()
	if during != nil {
		during()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sizes = append(q.sizes, len(slots))
	q.froms = append(q.froms, from)
	n := min(len(slots), q.backlog)
	q.backlog -= n
	out := make([]pulsetype.Claimed, n)
	for i := range out {
		q.taken++
		out[i] = pulsetype.Claimed{ID: uuid.New(), Attempt: 1, WorkerID: slots[i], Priority: 5,
			SubmittedAt: time.Unix(0, 0).Add(time.Duration(q.taken) * time.Microsecond)}
	}
	return out
}

func (q *queueClaimer) claimedFrom() []claimedFrom {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]claimedFrom(nil), q.froms...)
}

func (q *queueClaimer) claims() []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]int(nil), q.sizes...)
}

func TestClaimCooldown(t *testing.T) {
	t.Parallel()
	const cooldown = 50 * time.Millisecond
	// startBatch runs a dispatcher claiming at most batch per pass for one
	// worker with 10 slots.
	startBatch := func(t *testing.T, q *queueClaimer, batch int) (*dispatch.Dispatcher, *dispatch.Worker) {
		d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: time.Hour, Batch: batch, ClaimCooldown: cooldown},
			q, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return d, d.Registry().Add("w", []string{"t"}, 10)
	}
	start := func(t *testing.T, q *queueClaimer) (*dispatch.Dispatcher, *dispatch.Worker) {
		return startBatch(t, q, 100)
	}

	t.Run("AfterAFullClaimFreedSlotsGatherForOneCooldown", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q)
			d.JobsReady()
			synctest.Wait()
			require.Equal(t, []int{10}, q.claims(), "the first claim fills every free slot")
			require.Len(t, w.TakeOutbox(), 10)

			// Handlers finish one by one during the cooldown: no claim yet.
			for range 6 {
				d.Registry().Credit(w, 1)
				synctest.Wait()
			}
			require.Equal(t, []int{10}, q.claims(), "a credit during the cooldown claims nothing yet")

			time.Sleep(cooldown)
			synctest.Wait()
			require.Equal(t, []int{10, 6}, q.claims(), "after the cooldown one claim takes every slot freed meanwhile")
		})
	})

	t.Run("SlotsFreedWhileAFullClaimRunsWaitForTheCooldownToo", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, w := start(t, q)
			d.JobsReady()
			synctest.Wait()
			require.Len(t, w.TakeOutbox(), 10)

			// Six handlers finish; while the claim for their slots runs,
			// three more do.
			d.Registry().Credit(w, 6)
			q.mu.Lock()
			q.during = func() {
				q.mu.Lock()
				q.during = nil
				q.mu.Unlock()
				d.Registry().Credit(w, 3)
			}
			q.mu.Unlock()
			time.Sleep(cooldown)
			synctest.Wait()
			require.Equal(t, []int{10, 6}, q.claims(), "slots freed while a full claim ran are not claimed at once")

			time.Sleep(cooldown)
			synctest.Wait()
			require.Equal(t, []int{10, 6, 3}, q.claims(), "they go out together after the cooldown")
		})
	})

	t.Run("APassCappedAtOneBatchClaimsTheRestAtOnce", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 1000}
			d, _ := startBatch(t, q, 4)
			d.JobsReady()
			synctest.Wait()
			require.Equal(t, []int{4, 4, 2}, q.claims(), "slots already free past one batch are claimed without resting")
		})
	})

	t.Run("AnIdleQueueNeverWaits", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := &queueClaimer{backlog: 3}
			d, _ := start(t, q)
			d.JobsReady()
			synctest.Wait()
			require.Equal(t, []int{10}, q.claims(), "a short claim: the queue is empty")

			// A new job: its NOTIFY claims at once, no time passing.
			q.mu.Lock()
			q.backlog = 1
			q.mu.Unlock()
			d.JobsReady()
			synctest.Wait()
			require.Equal(t, []int{10, 7}, q.claims())
		})
	})
}

// topicClaimer is queueClaimer with a backlog per topic: a claim takes from
// the backlogs of the topics it names, and each claim is recorded as its
// topics and how many jobs it took.
type topicClaimer struct {
	mu      sync.Mutex
	backlog map[string]int
	claims  []string // "topic:taken"
}

func (q *topicClaimer) take(topics, slots []string) []pulsetype.Claimed {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []pulsetype.Claimed
	for _, t := range topics {
		n := min(len(slots)-len(out), q.backlog[t])
		q.backlog[t] -= n
		for range n {
			out = append(out, pulsetype.Claimed{ID: uuid.New(), Attempt: 1, Topic: t, WorkerID: slots[len(out)], Priority: 5,
				SubmittedAt: time.Now()})
		}
		q.claims = append(q.claims, fmt.Sprintf("%s:%d", t, n))
	}
	return out
}

func (q *topicClaimer) Claim(_ context.Context, topics, slots []string, _ time.Duration) ([]pulsetype.Claimed, error) {
	return q.take(topics, slots), nil
}

func (q *topicClaimer) ClaimAfter(_ context.Context, topics, slots []string, _ time.Duration, _ jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	return q.take(topics, slots), nil
}

func (q *topicClaimer) ClaimBefore(_ context.Context, topics, slots []string, _ time.Duration, _ jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	return q.take(topics, slots), nil
}

func (q *topicClaimer) add(topic string, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.backlog[topic] += n
}

func (q *topicClaimer) made() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.claims)
}

// TestAQuietTopicDoesNotWaitForABusyTopicsCooldown: a topic with a
// backlog rests for the cooldown after a full claim, but a new job of
// another topic, whose last claim came back short, is claimed the moment
// its NOTIFY arrives, and the busy topic still rests until the cooldown
// ends and then claims every slot freed meanwhile in one claim.
func TestAQuietTopicDoesNotWaitForABusyTopicsCooldown(t *testing.T) {
	t.Parallel()
	const cooldown = 50 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		q := &topicClaimer{backlog: map[string]int{"busy": 1000}}
		d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: time.Hour, Batch: 100,
			ClaimCooldown: cooldown, ClaimRescanInterval: time.Hour}, q, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		busy := d.Registry().Add("busy-worker", []string{"busy"}, 10)
		quiet := d.Registry().Add("quiet-worker", []string{"quiet"}, 4)

		d.JobsReady()
		synctest.Wait()
		require.Equal(t, []string{"busy:10", "quiet:0"}, q.made(), "the busy topic's claim comes back full, the quiet one's short")
		require.Len(t, busy.TakeOutbox(), 10)
		begin := time.Now()

		// The busy topic's handlers free six slots, and a job of the quiet
		// topic is inserted, all during the busy topic's rest.
		d.Registry().Credit(busy, 6)
		synctest.Wait()
		q.add("quiet", 1)
		d.TopicReady("quiet" + jobstore.NewJobsReady)
		synctest.Wait()
		require.Equal(t, []string{"busy:10", "quiet:0", "quiet:1"}, q.made(), "the quiet topic's job is claimed at once")
		require.Zero(t, time.Since(begin), "no time passed: it did not wait for the cooldown")
		require.Len(t, quiet.TakeOutbox(), 1)

		time.Sleep(cooldown)
		synctest.Wait()
		require.Equal(t, []string{"busy:10", "quiet:0", "quiet:1", "busy:6"}, q.made(),
			"the busy topic rested through the wake, then claimed the six freed slots in one claim")
	})
}
