package dispatch_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/dispatch"
)

// topicCounter counts the claim statements that asked for each topic,
// against the real store.
type topicCounter struct {
	store *jobstore.Store
	mu    sync.Mutex
	asked map[string]int
}

func (c *topicCounter) count(topics []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range topics {
		c.asked[t]++
	}
}

func (c *topicCounter) claimsOf(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked[topic]
}

func (c *topicCounter) Claim(ctx context.Context, topics, slots []string, ttl time.Duration) ([]pulsetype.Claimed, error) {
	c.count(topics)
	return c.store.Claim(ctx, topics, slots, ttl)
}

func (c *topicCounter) ClaimBefore(ctx context.Context, topics, slots []string, ttl time.Duration, at jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	c.count(topics)
	return c.store.ClaimBefore(ctx, topics, slots, ttl, at)
}

func (c *topicCounter) ClaimAfter(ctx context.Context, topics, slots []string, ttl time.Duration, after jobstore.ClaimCursor) ([]pulsetype.Claimed, error) {
	c.count(topics)
	return c.store.ClaimAfter(ctx, topics, slots, ttl, after)
}

// rateAwareCounter is topicCounter passing on the store's rate waits, as
// the gateway's claimer (the store itself) does.
type rateAwareCounter struct{ *topicCounter }

func (c rateAwareCounter) RateWaits(topics []string) map[string]jobstore.RateWait {
	return c.store.RateWaits(topics)
}

// A topic at its rate limit is not claimed again until its window opens:
// not on new jobs of it, not on notifications, not on poll ticks, while
// the dispatcher keeps serving an open topic beside it. Counted in claim
// statements, not wall-clock time; the same run without the rate wait
// shows what it saves.
func TestRateLimitedTopicSleepsUntilItsWindowOpens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		sleep bool
	}{{"Sleeps", true}, {"WithoutTheWait", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := jobstore.New(pgtest.Pool(t))
			counter := &topicCounter{store: store, asked: map[string]int{}}
			var claimer dispatch.Claimer = counter
			if tc.sleep {
				claimer = rateAwareCounter{counter}
			}
			// A fast poll: every tick is a chance to claim the topic again.
			d := dispatch.NewDispatcher(dispatch.DispatcherConfig{LeaseTTL: time.Minute, PollInterval: 5 * time.Millisecond, Batch: 50},
				claimer, nil, slog.New(slog.NewTextHandler(testWriter(t), nil)))
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { d.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })

			_, err := store.SetTopicRateLimit(t.Context(), "rl", &pulsetype.RateLimit{Limit: 2, Interval: time.Hour, Key: "none"}, "test")
			require.NoError(t, err)
			insertJobs(t, store, "rl", 10)
			rl := d.Registry().Add("rl-worker", []string{"rl"}, 10)
			open := d.Registry().Add("open-worker", []string{"open"}, 10)
			d.JobsReady()

			deadline := time.Now().Add(proctest.Patience)
			took := 0
			for took < 2 {
				require.True(t, time.Now().Before(deadline), "the first two jobs never came")
				select {
				case <-rl.Ready():
					took += len(rl.TakeOutbox())
				case <-time.After(10 * time.Millisecond):
				}
			}
			require.Equal(t, 2, took)
			before := counter.claimsOf("rl")

			// Twenty rounds, each proven to have run: a new job of each
			// topic and their notifications, then the open topic's job
			// delivered.
			const rounds = 20
			for range rounds {
				insertJobs(t, store, "rl", 1)
				insertJobs(t, store, "open", 1)
				d.TopicReady("rl")
				d.TopicReady("open")
				deadline := time.Now().Add(proctest.Patience)
				for {
					require.True(t, time.Now().Before(deadline), "the open topic's job never came")
					select {
					case <-open.Ready():
					case <-time.After(10 * time.Millisecond):
						continue
					}
					if n := len(open.TakeOutbox()); n > 0 {
						d.Registry().Credit(open, n)
						break
					}
				}
			}
			require.Empty(t, rl.TakeOutbox(), "nothing more of the limited topic started within its hour")
			during := counter.claimsOf("rl") - before
			t.Logf("claims of the rate-limited topic during %d rounds: %d", rounds, during)
			if !tc.sleep {
				require.GreaterOrEqual(t, during, rounds, "without the wait every round claims it")
				return
			}
			require.LessOrEqual(t, during, 1, "at most the short claim that learned the wait")

			// A change of the limit wakes it at once.
			_, err = store.SetTopicRateLimit(t.Context(), "rl", &pulsetype.RateLimit{Limit: 100, Interval: time.Hour, Key: "none"}, "test")
			require.NoError(t, err)
			d.TopicReady("rl" + jobstore.RateLimitsChanged)
			deadline = time.Now().Add(proctest.Patience)
			var got []string
			for len(got) < 8 {
				require.True(t, time.Now().Before(deadline), "the raised limit never let the rest start")
				select {
				case <-rl.Ready():
					for _, j := range rl.TakeOutbox() {
						got = append(got, j.Topic)
					}
				case <-time.After(10 * time.Millisecond):
				}
			}
			require.True(t, slices.IndexFunc(got, func(s string) bool { return s != "rl" }) < 0)
		})
	}
}
