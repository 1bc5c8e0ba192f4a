package jobstore_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// settle submits n jobs of topic, claims them and reports each with
// outcome: n attempts counted in job_throughput.
func settle(t *testing.T, store *jobstore.Store, topic string, n int, outcome pulsetype.Outcome) {
	t.Helper()
	for range n {
		job := newJob(topic, 5)
		requireInserted(t, store, job, pulsetype.Inserted{ID: job.ID})
		claimed, err := store.Claim(ctx, []string{topic}, slots("w", 1), time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		_, err = store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: claimed[0].ID, Attempt: claimed[0].Attempt}, Outcome: outcome}})
		require.NoError(t, err)
	}
}

func requireTransitions(t *testing.T, store *jobstore.Store, want ...jobstore.BreakerState) []jobstore.BreakerTransition {
	t.Helper()
	trs, err := store.EvaluateBreakers(ctx)
	require.NoError(t, err)
	got := make([]jobstore.BreakerState, len(trs))
	for i, tr := range trs {
		got[i] = tr.To
	}
	if len(want) == 0 {
		want = []jobstore.BreakerState{}
	}
	require.Equal(t, want, got, "%+v", trs)
	return trs
}

func topicLimit(t *testing.T, pool *pgxpool.Pool, topic string) *int32 {
	t.Helper()
	var n *int32
	err := pool.QueryRow(ctx, `SELECT max_running FROM topic_limits WHERE topic = $1`, topic).Scan(&n)
	if err != nil {
		require.ErrorContains(t, err, "no rows")
		return nil
	}
	return n
}

// A failing topic opens its breaker: the topic is paused by the breaker
// (audited, with the cooldown as its expiry) and no claim takes its jobs;
// after the cooldown it is half-open, one attempt at a time; a failure
// opens it again, a success closes it and restores the topic's limit; the
// failures that opened it do not open it again.
func TestBreakerOpensHalfOpensAndCloses(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool, jobstore.ThroughputWriter("gw-1"))
	const topic = "brk"
	_, err := store.SetTopicBreaker(ctx, topic, jobstore.BreakerConfig{FailureRatio: 0.5, Window: time.Minute, MinVolume: 4, Cooldown: time.Hour}, "ops")
	require.NoError(t, err)

	// Below the volume, or below the ratio: closed.
	settle(t, store, topic, 3, pulsetype.OutcomeFail)
	requireTransitions(t, store)
	settle(t, store, topic, 4, pulsetype.OutcomeComplete)
	requireTransitions(t, store)
	// 4 of 8 failed: 50 %.
	settle(t, store, topic, 1, pulsetype.OutcomeFailPermanent)
	trs := requireTransitions(t, store, jobstore.BreakerOpen)
	require.Contains(t, trs[0].Why, "4 of 8 attempts failed (50%, threshold 50%) within 1m0s")

	st, err := store.DispatchState(ctx)
	require.NoError(t, err)
	scope := st.Scope(topic)
	require.True(t, scope.Paused)
	require.Equal(t, jobstore.BreakerActor, scope.Actor)
	require.Contains(t, scope.Reason, "4 of 8 attempts failed")
	require.NotNil(t, scope.Until)
	require.WithinDuration(t, time.Now().Add(time.Hour), *scope.Until, time.Minute)
	require.EqualValues(t, 1, *topicLimit(t, pool, topic), "the trial limit waits for the pause's end")
	events, err := store.ListControlEvents(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, jobstore.ActionPause, events[0].Action)
	require.Equal(t, jobstore.BreakerActor, events[0].Actor)
	b, ok, err := store.TopicBreaker(ctx, topic)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, jobstore.BreakerOpen, b.State)
	require.EqualValues(t, 1, b.Opens)

	// Open: nothing of the topic is claimed, and its jobs say why.
	waiting := newJob(topic, 5)
	requireInserted(t, store, waiting, pulsetype.Inserted{ID: waiting.ID})
	more := newJob(topic, 5)
	requireInserted(t, store, more, pulsetype.Inserted{ID: more.ID})
	claimed, err := store.Claim(ctx, []string{topic}, slots("w", 5), time.Minute)
	require.NoError(t, err)
	require.Empty(t, claimed)
	job, err := store.Get(ctx, waiting.ID)
	require.NoError(t, err)
	wait, err := store.ExplainWait(ctx, job)
	require.NoError(t, err)
	require.Equal(t, jobstore.WaitBreakerOpen, wait.Reason)
	require.NotNil(t, wait.NotBefore)
	require.True(t, wait.NotBefore.Equal(*scope.Until))
	requireTransitions(t, store) // still cooling down

	// The cooldown ends: control-api's expiry sweep resumes the pause.
	_, err = pool.Exec(ctx, `UPDATE dispatch_control SET until = now() - interval '1 second' WHERE scope = $1`, topic)
	require.NoError(t, err)
	_, err = store.ResumeExpired(ctx)
	require.NoError(t, err)
	requireTransitions(t, store, jobstore.BreakerHalfOpen)
	// Half-open: one attempt at a time.
	claimed, err = store.Claim(ctx, []string{topic}, slots("w", 5), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	requireTransitions(t, store) // no outcome yet
	_, err = store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: claimed[0].ID, Attempt: 1}, Outcome: pulsetype.OutcomeFail}})
	require.NoError(t, err)
	// The trial failed: open again.
	trs = requireTransitions(t, store, jobstore.BreakerOpen)
	require.Contains(t, trs[0].Why, "half-open trial failed")
	claimed, err = store.Claim(ctx, []string{topic}, slots("w", 5), time.Minute)
	require.NoError(t, err)
	require.Empty(t, claimed)

	// This time the cooldown ends with no control-api running: the
	// breaker resumes the pause itself.
	_, err = pool.Exec(ctx, `UPDATE topic_breakers SET open_until = now() - interval '1 second' WHERE topic = $1`, topic)
	require.NoError(t, err)
	requireTransitions(t, store, jobstore.BreakerHalfOpen)
	claimed, err = store.Claim(ctx, []string{topic}, slots("w", 5), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = store.Report(ctx, "w", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: claimed[0].ID, Attempt: claimed[0].Attempt}, Outcome: pulsetype.OutcomeComplete}})
	require.NoError(t, err)
	trs = requireTransitions(t, store, jobstore.BreakerClosed)
	require.Equal(t, "the half-open trial completed", trs[0].Why)
	require.Nil(t, topicLimit(t, pool, topic), "the topic had no limit: none again")
	b, _, err = store.TopicBreaker(ctx, topic)
	require.NoError(t, err)
	require.Equal(t, jobstore.BreakerClosed, b.State)
	require.EqualValues(t, 2, b.Opens)

	// The failures that opened it are behind it.
	requireTransitions(t, store)
	for range 2 {
		j := newJob(topic, 5)
		requireInserted(t, store, j, pulsetype.Inserted{ID: j.ID})
	}
	claimed, err = store.Claim(ctx, []string{topic}, slots("w", 5), time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 2, "closed, the topic runs as many as it has")
}

// An operator's resume overrides an open breaker: it closes, and the
// topic's own limit comes back. Clearing a breaker lets go of what it
// holds.
func TestBreakerOperatorOverride(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool, jobstore.ThroughputWriter("gw-1"))
	const topic = "brk.ops"
	limit := 7
	_, err := store.SetTopicLimit(ctx, topic, &limit, "ops")
	require.NoError(t, err)
	cfg := jobstore.BreakerConfig{FailureRatio: 1, Window: 5 * time.Minute, MinVolume: 2, Cooldown: time.Hour}
	_, err = store.SetTopicBreaker(ctx, topic, cfg, "ops")
	require.NoError(t, err)
	settle(t, store, topic, 2, pulsetype.OutcomeFail)
	requireTransitions(t, store, jobstore.BreakerOpen)
	require.EqualValues(t, 1, *topicLimit(t, pool, topic))

	_, err = store.Resume(ctx, topic, "ops")
	require.NoError(t, err)
	trs := requireTransitions(t, store, jobstore.BreakerClosed)
	require.Equal(t, "ops changed the topic's pause", trs[0].Why)
	require.EqualValues(t, 7, *topicLimit(t, pool, topic))

	// Open again, then the breaker is cleared: resumed, limit restored.
	settle(t, store, topic, 2, pulsetype.OutcomeFail)
	requireTransitions(t, store, jobstore.BreakerOpen)
	ok, err := store.ClearTopicBreaker(ctx, topic, "ops")
	require.NoError(t, err)
	require.True(t, ok)
	st, err := store.DispatchState(ctx)
	require.NoError(t, err)
	require.False(t, st.Scope(topic).Paused)
	require.EqualValues(t, 7, *topicLimit(t, pool, topic))
	_, ok, err = store.TopicBreaker(ctx, topic)
	require.NoError(t, err)
	require.False(t, ok)
	requireTransitions(t, store)

	// A topic paused by an operator is not judged.
	_, err = store.SetTopicBreaker(ctx, topic, cfg, "ops")
	require.NoError(t, err)
	_, err = store.Pause(ctx, jobstore.PauseRequest{Scope: topic, Mode: jobstore.PauseDrain, Reason: "maintenance", Actor: "ops"})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE topic_breakers SET since_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	requireTransitions(t, store)
}

// Bad settings are refused naming the field, and nothing is written.
func TestBreakerSettingsRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	good := jobstore.BreakerConfig{FailureRatio: 0.5, Window: time.Minute, MinVolume: 10, Cooldown: 30 * time.Second}
	for field, c := range map[string]jobstore.BreakerConfig{
		"failure_ratio": {FailureRatio: 0, Window: time.Minute, MinVolume: 1, Cooldown: time.Second},
		"window":        {FailureRatio: 0.5, Window: 90 * time.Second, MinVolume: 1, Cooldown: time.Second},
		"min_volume":    {FailureRatio: 0.5, Window: time.Minute, MinVolume: 0, Cooldown: time.Second},
		"cooldown":      {FailureRatio: 0.5, Window: time.Minute, MinVolume: 1, Cooldown: 25 * time.Hour},
	} {
		_, err := store.SetTopicBreaker(ctx, "brk.bad", c, "ops")
		require.ErrorIs(t, err, apierr.ErrInvalidArgument, field)
		require.Equal(t, field, apierr.FieldOf(err))
	}
	_, err := store.SetTopicBreaker(ctx, "brk.bad", good, "")
	require.ErrorIs(t, err, apierr.ErrInvalidArgument)
	_, err = store.SetTopicBreaker(ctx, "bad topic", good, "ops")
	require.ErrorIs(t, err, apierr.ErrInvalidArgument)
	bs, err := store.Breakers(ctx)
	require.NoError(t, err)
	require.Empty(t, bs)
}
