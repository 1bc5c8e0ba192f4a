package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

func ptr(n int) *int { return &n }

// insertJobs inserts n PENDING jobs of topic at priority prio.
func insertJobs(t *testing.T, b *testBundle, topic string, prio int16, n int) []uuid.UUID {
	t.Helper()
	jobs := make([]pulsetype.NewJob, n)
	ids := make([]uuid.UUID, n)
	for i := range jobs {
		jobs[i] = newJob(topic, prio)
		ids[i] = jobs[i].ID
	}
	_, err := b.store.Insert(ctx, jobs)
	require.NoError(t, err)
	return ids
}

// complete reports the claimed jobs completed.
func complete(t *testing.T, b *testBundle, claimed []pulsetype.Claimed) {
	t.Helper()
	require.NoError(t, completeJobs(b, claimed))
}

// completeJobs is complete for goroutines other than the test's.
// claimThenComplete claims for slots from topics through st and completes
// what it took, as a worker loop of a test does; on an error it reports it
// (t.Errorf, so it may run on any goroutine) and returns ok false.
func claimThenComplete(t *testing.T, b *testBundle, st *jobstore.Store, topics, slots []string) (got []pulsetype.Claimed, ok bool) {
	got, err := st.Claim(ctx, topics, slots, ttl)
	if err != nil {
		t.Errorf("claim: %v", err)
		return nil, false
	}
	if err := completeJobs(b, got); err != nil {
		t.Errorf("complete: %v", err)
		return nil, false
	}
	return got, true
}

func completeJobs(b *testBundle, claimed []pulsetype.Claimed) error {
	if len(claimed) == 0 {
		return nil
	}
	results := make([]pulsetype.Result, len(claimed))
	for i, c := range claimed {
		results[i] = pulsetype.Result{Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: pulsetype.OutcomeComplete, Worker: c.WorkerID}
	}
	acks, err := b.store.Report(ctx, "", results)
	if err != nil {
		return err
	}
	for _, a := range acks {
		if !a.Accepted {
			return fmt.Errorf("report of %s refused: %s", a.Ref.ID, a.Reason)
		}
	}
	return nil
}

// listenReady opens a connection of its own that LISTENs on
// ReadyChannel, closed when the test ends.
func listenReady(t *testing.T, b *testBundle) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, b.pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	_, err = conn.Exec(ctx, "LISTEN "+jobstore.ReadyChannel)
	require.NoError(t, err)
	return conn
}

func claimTopics(t *testing.T, b *testBundle, topics []string, n int) []pulsetype.Claimed {
	t.Helper()
	got, err := b.store.Claim(ctx, topics, slots("w", n), ttl)
	require.NoError(t, err)
	return got
}

func TestTopicLimit(t *testing.T) {
	t.Parallel()

	t.Run("ClaimsNoMoreThanTheLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 10)
		setLimit(t, b, "lim", 3)
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 3)
		require.Empty(t, claimTopics(t, b, []string{"lim"}, 10), "at its limit the topic starts nothing")
	})

	t.Run("ZeroClaimsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 3)
		setLimit(t, b, "lim", 0)
		require.Empty(t, claimTopics(t, b, []string{"lim"}, 10))
	})

	t.Run("RaisingTakesEffectAtTheNextClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 10)
		setLimit(t, b, "lim", 2)
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 2)
		setLimit(t, b, "lim", 5)
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 3)
	})

	t.Run("LoweringBelowRunningClaimsNothingUntilRunningFallsBelow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 10)
		setLimit(t, b, "lim", 5)
		running := claimTopics(t, b, []string{"lim"}, 10)
		require.Len(t, running, 5)
		setLimit(t, b, "lim", 2)
		require.Empty(t, claimTopics(t, b, []string{"lim"}, 10), "5 run, the limit is 2")
		complete(t, b, running[:2])
		require.Empty(t, claimTopics(t, b, []string{"lim"}, 10), "3 run, the limit is 2")
		complete(t, b, running[2:4])
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 1, "1 runs, the limit is 2")
	})

	t.Run("SettlingWakesTheGatewaysForLimitedTopicsOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 3)
		insertJobs(t, b, "open", 5, 3)
		setLimit(t, b, "lim", 2)
		lim := claimTopics(t, b, []string{"lim"}, 10)
		require.Len(t, lim, 2)
		open := claimTopics(t, b, []string{"open"}, 10)
		require.Len(t, open, 3)

		conn := listenReady(t, b)

		// In commit order: the unlimited topic's report, a marker, the
		// limited topic's report (two jobs, one statement), a marker, and
		// a failure of the unlimited topic's job that is also a retry.
		complete(t, b, open[:1])
		_, err := b.pool.Exec(ctx, `SELECT pg_notify($1, 'marker 1')`, jobstore.ReadyChannel)
		require.NoError(t, err)
		complete(t, b, lim)
		_, err = b.pool.Exec(ctx, `SELECT pg_notify($1, 'marker 2')`, jobstore.ReadyChannel)
		require.NoError(t, err)
		acks, err := b.store.Report(ctx, "", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: open[1].ID, Attempt: open[1].Attempt},
			Outcome: pulsetype.OutcomeFail, Error: "boom", Worker: open[1].WorkerID}})
		require.NoError(t, err)
		require.True(t, acks[0].Accepted)
		_, err = b.pool.Exec(ctx, `SELECT pg_notify($1, 'marker 3')`, jobstore.ReadyChannel)
		require.NoError(t, err)

		var got []string
		for len(got) == 0 || got[len(got)-1] != "marker 3" {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			got = append(got, n.Payload)
		}
		require.Equal(t, []string{"marker 1", "lim", "marker 2", "marker 3"}, got,
			"one wake per limited topic per report; none for a topic without a limit")
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 1, "the room the report freed is claimable")
	})

	t.Run("ReapingAnExpiredLeaseWakesTheGateways", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 2)
		setLimit(t, b, "lim", 1)
		lapsing, err := b.store.Claim(ctx, []string{"lim"}, slots("w", 10), time.Millisecond)
		require.NoError(t, err)
		require.Len(t, lapsing, 1, "the limit is 1")

		conn := listenReady(t, b)
		require.Eventually(t, func() bool {
			reaped, err := b.store.Reap(ctx, 10)
			require.NoError(t, err)
			return len(reaped) == 1
		}, 10*time.Second, 5*time.Millisecond, "the 1 ms lease lapses and is reaped")

		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		require.NoError(t, err)
		require.Equal(t, "lim", n.Payload)
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 1, "the room the reaper freed is claimable")
	})

	t.Run("ClearingRemovesTheCap", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 10)
		setLimit(t, b, "lim", 1)
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 1)
		info, err := b.store.SetTopicLimit(ctx, "lim", nil, "alice")
		require.NoError(t, err)
		require.Nil(t, info.MaxRunning)
		require.Empty(t, info.LimitUpdatedBy)
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 9)
	})

	t.Run("MixedGroupKeepsDispatchOrderAndServesTheUnlimited", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		base := time.Now().Add(-time.Hour)
		row := func(topic string, prio int16, at int) uuid.UUID {
			return insertRow(t, b.pool, rowOpts{Topic: topic, Priority: prio, SubmittedAt: base.Add(time.Duration(at) * time.Second)})
		}
		// Dispatch order: open10, lim9a, lim9b, lim9c, open5a, open5b.
		open10 := row("open", 10, 9)
		lim9a, lim9b := row("lim", 9, 1), row("lim", 9, 2)
		row("lim", 9, 3)
		open5a, open5b := row("open", 5, 1), row("open", 5, 2)
		setLimit(t, b, "lim", 2)

		got := claimTopics(t, b, []string{"lim", "open"}, 4)
		ids := make([]uuid.UUID, len(got))
		for i, c := range got {
			ids[i] = c.ID
		}
		require.ElementsMatch(t, []uuid.UUID{open10, lim9a, lim9b, open5a}, ids,
			"the first four the limit allows, in priority then FIFO order")

		// At its limit, the limited topic's backlog holds back nothing.
		got = claimTopics(t, b, []string{"lim", "open"}, 4)
		require.Len(t, got, 1)
		require.Equal(t, open5b, got[0].ID)
	})

	t.Run("PauseStillStopsALimitedTopic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertJobs(t, b, "lim", 5, 3)
		setLimit(t, b, "lim", 10)
		for _, scope := range []string{"lim", jobstore.GlobalScope} {
			_, err := b.store.Pause(ctx, pauseReq(scope, jobstore.PauseDrain, "x", "alice"))
			require.NoError(t, err)
			require.Empty(t, claimTopics(t, b, []string{"lim"}, 10), scope)
			_, err = b.store.Resume(ctx, scope, "alice")
			require.NoError(t, err)
		}
		require.Len(t, claimTopics(t, b, []string{"lim"}, 10), 3)
	})

	t.Run("RefusesBadValuesNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tc := range []struct {
			topic string
			limit *int
			actor string
			field string
		}{
			{"lim", ptr(-1), "alice", "max_running"},
			{"lim", ptr(pulsetype.MaxTopicLimit + 1), "alice", "max_running"},
			{"", ptr(1), "alice", "topic"},
			{"bad topic", ptr(1), "alice", "topic"},
			{"nul\x00", ptr(1), "alice", "topic"},
			{"\xff", ptr(1), "alice", "topic"},
			{"lim", ptr(1), "", "actor"},
			{"lim", ptr(1), "a\x00", "actor"},
		} {
			_, err := b.store.SetTopicLimit(ctx, tc.topic, tc.limit, tc.actor)
			require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%q", tc.topic)
			require.Equal(t, tc.field, apierr.FieldOf(err), "%q: %v", tc.topic, err)
		}
		setLimit(t, b, "lim", pulsetype.MaxTopicLimit)
	})

	t.Run("SchemaTriggerTakesThePauseBarrier", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A limit typed in psql must wait out claims like SetTopicLimit.
		var src string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'topic_limits_barrier'`).Scan(&src))
		require.Contains(t, src, "pg_advisory_xact_lock("+jobstore.PauseBarrierKey+")")
	})

	t.Run("SameLimitAgainWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := b.store.SetTopicLimit(ctx, "lim", ptr(4), "alice")
		require.NoError(t, err)
		require.Equal(t, 4, *first.MaxRunning)
		require.Equal(t, "alice", first.LimitUpdatedBy)
		again, err := b.store.SetTopicLimit(ctx, "lim", ptr(4), "bob")
		require.NoError(t, err)
		require.Equal(t, "alice", again.LimitUpdatedBy, "nothing changed, nothing recorded")
		require.Equal(t, first.LimitUpdatedAt, again.LimitUpdatedAt)
	})
}

func TestTopics(t *testing.T) {
	t.Parallel()

	t.Run("CountsEachTopic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusPending})
		insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusPending})
		insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusRunning, LockedBy: "w"})
		insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusRetrying, Attempts: 1, MaxAttempts: 3})
		insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusDeadLettered, Attempts: 1, MaxAttempts: 1})
		insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusCompleted, Attempts: 1})
		insertRow(t, b.pool, rowOpts{Topic: "done", Status: pulsetype.StatusCompleted, Attempts: 1})
		_, err := b.store.SetTopicLimit(ctx, "limited", ptr(7), "alice")
		require.NoError(t, err)
		_, err = b.store.Pause(ctx, pauseReq("paused", jobstore.PauseDrain, "x", "alice"))
		require.NoError(t, err)
		_, err = b.store.OpenPresence(ctx, "gw", jobstore.Presence{WorkerID: "w1", Principal: "p", Topics: []string{"a", "served"}}, time.Minute)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `
INSERT INTO job_throughput (bucket, topic, writer, completed, failed, dead_lettered) VALUES
    (date_trunc('minute', now()), 'a', 'gw1', 5, 2, 1),
    (date_trunc('minute', now()) - interval '10 minutes', 'a', 'gw2', 3, 0, 0),
    (date_trunc('minute', now()) - interval '2 hours', 'a', 'gw1', 100, 100, 0)`)
		require.NoError(t, err)

		topics, err := b.store.Topics(ctx)
		require.NoError(t, err)
		byName := map[string]jobstore.TopicInfo{}
		var names []string
		for _, ti := range topics {
			byName[ti.Topic] = ti
			names = append(names, ti.Topic)
		}
		require.Equal(t, []string{"a", "limited", "paused", "served"}, names,
			"by name; a topic with only finished jobs and no recent throughput is not listed")
		a := byName["a"]
		require.Equal(t, int64(2), a.Pending)
		require.Equal(t, int64(1), a.Running)
		require.Equal(t, int64(1), a.Retrying)
		require.Equal(t, int64(1), a.DeadLettered)
		require.Equal(t, int64(8), a.CompletedLastHour)
		require.Equal(t, int64(2), a.FailedLastHour)
		require.NotNil(t, a.OldestPendingAge)
		require.Nil(t, a.MaxRunning)
		require.Equal(t, 1, a.ConnectedWorkers)
		require.False(t, a.Paused)
		require.Equal(t, 7, *byName["limited"].MaxRunning)
		require.Equal(t, "alice", byName["limited"].LimitUpdatedBy)
		require.NotNil(t, byName["limited"].LimitUpdatedAt)
		require.True(t, byName["paused"].Paused)

		_, err = b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, "x", "alice"))
		require.NoError(t, err)
		one, err := b.store.Topic(ctx, "served")
		require.NoError(t, err)
		require.True(t, one.Paused, "the global pause pauses every topic")
		nobody, err := b.store.Topic(ctx, "nobody")
		require.NoError(t, err)
		require.Equal(t, jobstore.TopicInfo{Topic: "nobody", Paused: true}, nobody)
	})

	t.Run("DeadLetteredCountReadsItsIndexNotTheTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		plan := explain(t, b, jobstore.CountsPlanSQL, jobstore.TopicsSQL, nil)
		dead := plan.find("CTE dead")
		require.NotNil(t, dead, plan.text)
		require.Contains(t, strings.Join(dead.nodes(), "\n"), "jobs_dead_lettered_topic_idx", plan.text)
	})
}

// TestTopicLimitIsExactUnderConcurrentClaimers races claimers on separate
// connections (mixed groups of a limited and an unlimited topic, random
// batch sizes) and completers against each other, and changes the limit
// while they run. The witness checks, at every claim's commit, that no
// more jobs of the limited topic were running than its limit then in
// force.
func TestTopicLimitIsExactUnderConcurrentClaimers(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		change bool // SetTopicLimit races the claims
	}{{"FixedLimit", false}, {"LimitChangesWhileClaiming", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			require.NoError(t, claimwitness.InstallLimits(ctx, b.pool))
			insertJobs(t, b, "lim", 5, 3000)
			insertJobs(t, b, "open", 5, 3000)
			_, err := b.store.SetTopicLimit(ctx, "lim", ptr(7), "test")
			require.NoError(t, err)

			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			var wg sync.WaitGroup
			var timeouts atomic.Int64
			done := make(chan struct{})
			claimed := make(chan []pulsetype.Claimed, 64)
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
					groups := [][]string{{"lim"}, {"lim", "open"}, {"open"}}
					for {
						select {
						case <-done:
							return
						default:
						}
						got, err := b.store.Claim(ctx, groups[rng.IntN(len(groups))], slots(fmt.Sprintf("w%d", w), 1+rng.IntN(6)), ttl)
						if errors.Is(err, context.DeadlineExceeded) {
							// The claim's statement timeout (ClaimStatementTimeout):
							// six claimers queue on the limited topic's lock, and a
							// loaded machine can keep the last past a second. The
							// claim wrote nothing and a dispatcher claims again,
							// as this one does; exactness is what is tested.
							timeouts.Add(1)
							continue
						}
						if err != nil {
							t.Errorf("claim: %v", err)
							return
						}
						if len(got) > 0 {
							claimed <- got
						} else {
							time.Sleep(time.Millisecond) // at the limit: let the completers run
						}
					}
				}()
			}
			// Completers finish claimed jobs after a little while, so the
			// limited topic keeps hitting its limit and freeing room.
			var cwg sync.WaitGroup
			for range 2 {
				cwg.Add(1)
				go func() {
					defer cwg.Done()
					for got := range claimed {
						time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
						if err := completeJobs(b, got); err != nil {
							t.Errorf("complete: %v", err)
						}
					}
				}()
			}
			if tc.change {
				rng := rand.New(rand.NewPCG(uint64(seed), 99))
				for range 60 {
					var limit *int
					if n := rng.IntN(12); n < 11 {
						limit = ptr(n)
					}
					_, err := b.store.SetTopicLimit(ctx, "lim", limit, "test")
					require.NoError(t, err)
					time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
				}
				_, err := b.store.SetTopicLimit(ctx, "lim", ptr(7), "test")
				require.NoError(t, err)
			}
			for {
				n, top, err := claimwitness.LimitedClaims(ctx, b.pool, "lim")
				require.NoError(t, err)
				if n >= 300 && top >= 7 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			close(done)
			wg.Wait()
			close(claimed)
			cwg.Wait()

			over, err := claimwitness.OverLimits(ctx, b.pool)
			require.NoError(t, err)
			for _, o := range over {
				t.Errorf("over the limit: %s", o)
			}
			n, top, err := claimwitness.LimitedClaims(ctx, b.pool, "lim")
			require.NoError(t, err)
			t.Logf("%d limited claims, at most %d running at a commit, %d claims past their timeout", n, top, timeouts.Load())
		})
	}
}

// setLimit caps topic at n running jobs, as an operator would.
func setLimit(t *testing.T, b *testBundle, topic string, n int) {
	t.Helper()
	_, err := b.store.SetTopicLimit(t.Context(), topic, ptr(n), "alice")
	require.NoError(t, err)
}
