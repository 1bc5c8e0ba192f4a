package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// slowClaimer is a topicClaimer whose claims of some topics take time, as
// a busy topic's large batch or a rescan under an old snapshot does, and
// which records how many claims of each group were in flight at once.
type slowClaimer struct {
	*topicClaimer
	cost map[string]time.Duration // by a group's first topic; set before use

	mu          sync.Mutex
	inFlight    map[string]int
	maxInFlight map[string]int
}

func newSlowClaimer(backlog map[string]int, cost map[string]time.Duration) *slowClaimer {
	return &slowClaimer{topicClaimer: &topicClaimer{backlog: backlog}, cost: cost,
		inFlight: map[string]int{}, maxInFlight: map[string]int{}}
}

func (q *slowClaimer) claim(topics, slots []string) []pulsetype.Claimed {
	key := strings.Join(topics, ",")
	q.mu.Lock()
	q.inFlight[key]++
	q.maxInFlight[key] = max(q.maxInFlight[key], q.inFlight[key])
	q.mu.Unlock()
	time.Sleep(q.cost[topics[0]])
	out := q.take(topics, slots)
	q.mu.Lock()
	q.inFlight[key]--
	q.mu.Unlock()
	return out
}

func (q *slowClaimer) Claim(_ context.Context, topics, slots []string, _ time.Duration) ([]pulsetype.Claimed, error) {
	return q.claim(topics, slots), nil
}

func (q *slowClaimer) ClaimAfter(_ context.Context, topics, slots []string, _ time.Duration, _ jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	return q.claim(topics, slots), nil
}

func (q *slowClaimer) ClaimBefore(_ context.Context, topics, slots []string, _ time.Duration, _ jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	return q.claim(topics, slots), nil
}

func (q *slowClaimer) mostInFlight() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[string]int{}
	for k, v := range q.maxInFlight {
		out[k] = v
	}
	return out
}

// startLanes runs n lanes over q until the test ends.
func startLanes(t *testing.T, n int, q dispatch.Claimer) *dispatch.Lanes {
	l := dispatch.NewLanes(n, dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: time.Second, Batch: 100,
		ClaimRescanInterval: time.Hour}, q, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

func TestLanes(t *testing.T) {
	t.Parallel()
	const slow = 50 * time.Millisecond

	// quietWaits reports how long a new job of a quiet topic waited for
	// its claim while a busy topic's claim was in flight on n lanes.
	quietWaits := func(t *testing.T, n int) time.Duration {
		var waited time.Duration
		synctest.Test(t, func(t *testing.T) {
			q := newSlowClaimer(map[string]int{"busy": 1000}, map[string]time.Duration{"busy": slow})
			l := startLanes(t, n, q)
			l.Registry().Add("busy-worker", []string{"busy"}, 10)
			quiet := l.Registry().Add("quiet-worker", []string{"quiet"}, 4)
			l.JobsReady()
			// Halfway through the busy topic's first claim, a job of the
			// quiet topic is inserted.
			time.Sleep(slow / 2)
			begin := time.Now()
			q.add("quiet", 1)
			l.TopicReady("quiet" + jobstore.NewJobsReady)
			for i := 0; ; i++ {
				synctest.Wait()
				if len(quiet.TakeOutbox()) > 0 {
					break
				}
				require.Less(t, i, 1000, "the quiet topic's job was never claimed")
				time.Sleep(time.Millisecond)
			}
			waited = time.Since(begin)
		})
		return waited
	}

	t.Run("ABusyGroupsClaimDoesNotHoldUpAnotherGroups", func(t *testing.T) {
		t.Parallel()
		require.Zero(t, quietWaits(t, 2), "on its own lane the quiet topic's job is claimed the moment its wake arrives")
	})

	t.Run("OneLaneClaimsOneGroupAtATime", func(t *testing.T) {
		t.Parallel()
		// The contrast that shows the test above can fail: one loop finishes
		// the busy claim in flight before it claims for anyone else.
		require.Equal(t, slow/2, quietWaits(t, 1))
	})

	// busyGroups runs five groups of two workers with 20 slots each, twice
	// what one claim takes (Batch 100), on n lanes, the workers crediting
	// back what they were sent every millisecond for 200 ms, and returns
	// the most claims each group had in flight at once.
	busyGroups := func(t *testing.T, n int) map[string]int {
		var most map[string]int
		synctest.Test(t, func(t *testing.T) {
			topics := []string{"a", "b", "c", "d", "e"}
			backlog, cost := map[string]int{}, map[string]time.Duration{}
			for i, tp := range topics {
				backlog[tp] = 10000
				cost[tp] = time.Duration(i+1) * time.Millisecond
			}
			q := newSlowClaimer(backlog, cost)
			l := startLanes(t, n, q)
			var workers []*dispatch.Worker
			for _, tp := range topics {
				for range 2 {
					workers = append(workers, l.Registry().Add(tp+"-worker", []string{tp}, 20))
				}
			}
			l.JobsReady()
			// Workers finish what they were sent and credit it back, for a
			// while, while every lane claims for its groups.
			for range 200 {
				time.Sleep(time.Millisecond)
				for _, w := range workers {
					if n := len(w.TakeOutbox()); n > 0 {
						l.Registry().Credit(w, n)
					}
				}
			}
			most = q.mostInFlight()
		})
		return most
	}

	t.Run("AGroupIsNeverClaimedTwiceAtOnce", func(t *testing.T) {
		t.Parallel()
		most := busyGroups(t, 3)
		require.Len(t, most, 5, "every group was claimed for")
		for tp, n := range most {
			require.Equal(t, 1, n, "group %s had one claim in flight at a time", tp)
		}
	})

	t.Run("GroupsPastOneBatchAreServedInTurn", func(t *testing.T) {
		t.Parallel()
		// One loop, and the first groups in key order could fill every
		// batch: the groups after them still get claims.
		require.Len(t, busyGroups(t, 1), 5, "every group was claimed for")
	})

	t.Run("AGroupWhoseWorkersLeftGivesUpItsLane", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			q := newSlowClaimer(map[string]int{"busy": 1000}, map[string]time.Duration{"busy": slow})
			l := startLanes(t, 2, q)
			// A group takes its lane when its first worker arrives: "busy"
			// the first, "gone" the second.
			busy := l.Registry().Add("busy-worker", []string{"busy"}, 10)
			gone := l.Registry().Add("gone-worker", []string{"gone"}, 4)
			l.JobsReady()
			synctest.Wait()
			// The worker of "gone" leaves and a poll tick passes, so its
			// lane is free for the next group; left assigned, the lanes
			// would tie and the next group would join the first, busy's.
			l.Registry().Remove(gone)
			time.Sleep(time.Second)
			synctest.Wait()
			quiet := l.Registry().Add("quiet-worker", []string{"quiet"}, 4)
			// The busy worker finishes its jobs: its next claim starts.
			l.Registry().Credit(busy, len(busy.TakeOutbox()))
			time.Sleep(slow / 2)
			begin := time.Now()
			q.add("quiet", 1)
			l.TopicReady("quiet" + jobstore.NewJobsReady)
			synctest.Wait()
			require.Len(t, quiet.TakeOutbox(), 1, "the new group took the free lane, beside the busy one's")
			require.Zero(t, time.Since(begin))
		})
	})
}
