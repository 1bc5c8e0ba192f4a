package jobstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/testtool"
)

func pauseReq(scope string, mode jobstore.PauseMode, reason, actor string) jobstore.PauseRequest {
	return jobstore.PauseRequest{Scope: scope, Mode: mode, Reason: reason, Actor: actor}
}

func events(t *testing.T, b *testBundle) []jobstore.ControlEvent {
	t.Helper()
	evs, err := b.store.ListControlEvents(ctx, 0, 100)
	require.NoError(t, err)
	return evs
}

func TestDispatchControl(t *testing.T) {
	t.Parallel()

	t.Run("FreshDeploymentDispatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st, err := b.store.DispatchState(ctx)
		require.NoError(t, err)
		require.Len(t, st.Scopes, 1)
		require.Equal(t, jobstore.GlobalScope, st.Scopes[0].Scope)
		require.False(t, st.Scopes[0].Paused)
		require.Positive(t, st.Version)
		_, blocked := st.Blocking("any.topic")
		require.False(t, blocked)
		require.Empty(t, events(t, b))
	})

	t.Run("PauseIsIdempotentAndEveryChangeIsVersionedAndAudited", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before, err := b.store.DispatchState(ctx)
		require.NoError(t, err)

		p1, err := b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, "db upgrade", "alice"))
		require.NoError(t, err)
		require.True(t, p1.Changed)
		require.True(t, p1.State.Paused)
		require.Equal(t, "alice", p1.State.Actor)
		require.NotNil(t, p1.State.PausedAt)
		require.Greater(t, p1.State.Version, before.Version)

		// The same pause again: nothing written, no version, no event.
		p2, err := b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, "db upgrade", "bob"))
		require.NoError(t, err)
		require.False(t, p2.Changed)
		require.Equal(t, p1.State.Version, p2.State.Version)
		require.Equal(t, "alice", p2.State.Actor)
		require.Len(t, events(t, b), 1)

		// A new mode is an update: new version, new event, same paused_at.
		p3, err := b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseQuiesce, "db upgrade", "bob"))
		require.NoError(t, err)
		require.True(t, p3.Changed)
		require.Greater(t, p3.State.Version, p1.State.Version)
		require.True(t, p3.State.PausedAt.Equal(*p1.State.PausedAt), "changing the mode keeps the pause's start")

		// A new reason is an update too.
		p4, err := b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseQuiesce, "db upgrade, step 2", "bob"))
		require.NoError(t, err)
		require.True(t, p4.Changed)
		require.Greater(t, p4.State.Version, p3.State.Version)

		r1, err := b.store.Resume(ctx, jobstore.GlobalScope, "carol")
		require.NoError(t, err)
		require.True(t, r1.Changed)
		require.False(t, r1.State.Paused)
		require.Empty(t, r1.State.Reason, "resume clears the reason")
		require.True(t, r1.State.PausedAt.Equal(*p1.State.PausedAt), "resume keeps paused_at")
		require.Greater(t, r1.State.Version, p4.State.Version)

		r2, err := b.store.Resume(ctx, jobstore.GlobalScope, "dave")
		require.NoError(t, err)
		require.False(t, r2.Changed)
		require.Equal(t, r1.State.Version, r2.State.Version)

		evs := events(t, b)
		require.Len(t, evs, 4)
		type row struct {
			action      jobstore.ControlAction
			mode        jobstore.PauseMode
			reason, who string
			version     int64
		}
		var got []row
		for _, e := range evs {
			require.Equal(t, jobstore.GlobalScope, e.Scope)
			got = append(got, row{e.Action, e.Mode, e.Reason, e.Actor, e.Version})
		}
		require.Equal(t, []row{ // newest first
			{jobstore.ActionResume, jobstore.PauseQuiesce, "", "carol", r1.State.Version},
			{jobstore.ActionPause, jobstore.PauseQuiesce, "db upgrade, step 2", "bob", p4.State.Version},
			{jobstore.ActionPause, jobstore.PauseQuiesce, "db upgrade", "bob", p3.State.Version},
			{jobstore.ActionPause, jobstore.PauseDrain, "db upgrade", "alice", p1.State.Version},
		}, got)

		st, err := b.store.DispatchState(ctx)
		require.NoError(t, err)
		require.Equal(t, r1.State.Version, st.Version)
	})

	t.Run("TopicScopesAreCreatedOnFirstPauseAndKept", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r, err := b.store.Resume(ctx, "never.paused", "alice")
		require.NoError(t, err)
		require.False(t, r.Changed)
		require.Empty(t, events(t, b))

		_, err = b.store.Pause(ctx, pauseReq("email.send", jobstore.PauseDrain, "smtp outage", "alice"))
		require.NoError(t, err)
		st, err := b.store.DispatchState(ctx)
		require.NoError(t, err)
		require.Len(t, st.Scopes, 2)
		blocking, blocked := st.Blocking("email.send")
		require.True(t, blocked)
		require.Equal(t, "email.send", blocking.Scope)
		_, blocked = st.Blocking("other")
		require.False(t, blocked)

		_, err = b.store.Resume(ctx, "email.send", "bob")
		require.NoError(t, err)
		st, err = b.store.DispatchState(ctx)
		require.NoError(t, err)
		require.Len(t, st.Scopes, 2, "a resumed topic keeps its row (and its paused_at)")
		require.False(t, st.Scope("email.send").Paused)
		require.NotNil(t, st.Scope("email.send").PausedAt)
	})

	t.Run("ChangesNotifyTheGatewaysOnCommit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		conn, err := pgx.Connect(ctx, b.pool.Config().ConnString())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "LISTEN "+jobstore.DispatchControlChannel)
		require.NoError(t, err)

		p, err := b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, "x", "alice"))
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		require.NoError(t, err)
		require.Equal(t, jobstore.DispatchControlChannel, n.Channel)
		require.Equal(t, p.State.Version, mustInt(t, n.Payload))
	})

	t.Run("ExpiredPauseResumesOnceAsTheSystem", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		past := time.Now().Add(-time.Second)
		future := time.Now().Add(time.Hour)
		_, err := b.store.Pause(ctx, jobstore.PauseRequest{Scope: "a", Mode: jobstore.PauseDrain, Reason: "short", Actor: "alice", Until: &past})
		require.NoError(t, err)
		_, err = b.store.Pause(ctx, jobstore.PauseRequest{Scope: "b", Mode: jobstore.PauseDrain, Reason: "long", Actor: "alice", Until: &future})
		require.NoError(t, err)

		// Several control-api replicas sweep at once; the pause ends once.
		var wg sync.WaitGroup
		var mu sync.Mutex
		var resumed []string
		for range 4 {
			wg.Go(func() {
				got, err := b.store.ResumeExpired(ctx)
				require.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				for _, s := range got {
					resumed = append(resumed, s.Scope)
				}
			})
		}
		wg.Wait()
		require.Equal(t, []string{"a"}, resumed)

		st, err := b.store.DispatchState(ctx)
		require.NoError(t, err)
		require.False(t, st.Scope("a").Paused)
		require.Nil(t, st.Scope("a").Until)
		require.Equal(t, jobstore.SystemActor, st.Scope("a").Actor)
		require.True(t, st.Scope("b").Paused)

		evs := events(t, b)
		require.Len(t, evs, 3)
		auto := evs[0]
		require.Equal(t, jobstore.ActionResume, auto.Action)
		require.Equal(t, "a", auto.Scope)
		require.Equal(t, jobstore.SystemActor, auto.Actor)
		require.Equal(t, jobstore.ExpiredPauseReason, auto.Reason)
		require.NotNil(t, auto.Until)
		require.WithinDuration(t, past, *auto.Until, time.Millisecond)
	})

	t.Run("EventsPageNewestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := range 5 {
			_, err := b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, strings.Repeat("r", i+1), "alice"))
			require.NoError(t, err)
		}
		page1, err := b.store.ListControlEvents(ctx, 0, 2)
		require.NoError(t, err)
		page2, err := b.store.ListControlEvents(ctx, page1[1].ID, 2)
		require.NoError(t, err)
		page3, err := b.store.ListControlEvents(ctx, page2[1].ID, 2)
		require.NoError(t, err)
		var reasons []string
		for _, e := range append(append(page1, page2...), page3...) {
			reasons = append(reasons, e.Reason)
		}
		require.Equal(t, []string{"rrrrr", "rrrr", "rrr", "rr", "r"}, reasons)
	})

	t.Run("SchemaRejectsWhatTheAPIWouldRefuse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, strings.Repeat("x", pulsetype.MaxPauseReasonChars+1), "alice"))
		require.ErrorIs(t, err, apierr.ErrInvalidArgument)
		require.Equal(t, "reason", apierr.FieldOf(err))
		_, err = b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, "", "alice"))
		require.ErrorIs(t, err, apierr.ErrInvalidArgument)
		_, err = b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, "freeze", "x", "alice"))
		require.ErrorIs(t, err, apierr.ErrInvalidArgument)
		require.Equal(t, "mode", apierr.FieldOf(err))
		_, err = b.store.Pause(ctx, pauseReq("bad topic!", jobstore.PauseDrain, "x", "alice"))
		require.ErrorIs(t, err, apierr.ErrInvalidArgument)
		require.Equal(t, "topic", apierr.FieldOf(err))
		require.Empty(t, events(t, b), "nothing half-written")

		_, err = b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, "x", "alice"))
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE control_events SET actor = 'mallory'`)
		require.ErrorContains(t, err, "append-only")
		_, err = b.pool.Exec(ctx, `DELETE FROM control_events`)
		require.ErrorContains(t, err, "append-only")
	})

	t.Run("HandTypedUpdateStillGetsANewVersion", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before, err := b.store.DispatchState(ctx)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE dispatch_control SET paused = true, reason = 'psql', paused_at = now() WHERE scope = '*'`)
		require.NoError(t, err)
		after, err := b.store.DispatchState(ctx)
		require.NoError(t, err)
		require.Greater(t, after.Version, before.Version)
		require.True(t, after.Scope(jobstore.GlobalScope).Paused)
	})
}

func TestClaimUnderPause(t *testing.T) {
	t.Parallel()

	t.Run("PausedTopicIsSkippedOthersAreClaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 9})
		bb := insertRow(t, b.pool, rowOpts{Topic: "b", Priority: 1})
		_, err := b.store.Pause(ctx, pauseReq("a", jobstore.PauseDrain, "a is down", "alice"))
		require.NoError(t, err)

		c, err := b.store.Claim(ctx, []string{"a", "b"}, slots("w", 5), ttl)
		require.NoError(t, err)
		require.Len(t, c, 1)
		require.Equal(t, bb, c[0].ID)
		require.Equal(t, pulsetype.StatusPending, statusOf(t, b.pool, a))

		_, err = b.store.Resume(ctx, "a", "alice")
		require.NoError(t, err)
		c, err = b.store.Claim(ctx, []string{"a", "b"}, slots("w", 5), ttl)
		require.NoError(t, err)
		require.Len(t, c, 1)
		require.Equal(t, a, c[0].ID)
	})

	t.Run("GlobalPauseStopsEveryTopicAndResumeKeepsPriorityOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseDrain, "upgrade", "alice"))
		require.NoError(t, err)
		base := time.Now().Add(-time.Hour)
		low := insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 1, SubmittedAt: base})
		high := insertRow(t, b.pool, rowOpts{Topic: "b", Priority: 9, SubmittedAt: base.Add(time.Second)})
		mid := insertRow(t, b.pool, rowOpts{Topic: "a", Priority: 5, SubmittedAt: base.Add(2 * time.Second)})

		c, err := b.store.Claim(ctx, []string{"a", "b"}, slots("w", 5), ttl)
		require.NoError(t, err)
		require.Empty(t, c)

		_, err = b.store.Resume(ctx, jobstore.GlobalScope, "alice")
		require.NoError(t, err)
		var got []any
		for range 3 {
			c, err := b.store.Claim(ctx, []string{"a", "b"}, slots("w", 1), ttl)
			require.NoError(t, err)
			require.Len(t, c, 1)
			got = append(got, c[0].ID)
		}
		require.Equal(t, []any{high, mid, low}, got)
	})

	t.Run("PlanWalksTheClaimIndexInOrderWithoutJIT", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs := make([]pulsetype.NewJob, 2000)
		for i := range jobs {
			jobs[i] = newJob([]string{"a", "b", "c"}[i%3], int16(i%11))
		}
		_, err := b.store.Insert(ctx, jobs)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `ANALYZE jobs`)
		require.NoError(t, err)
		_, err = b.store.SetTopicLimit(ctx, "a", ptr(10), "alice")
		require.NoError(t, err)

		for _, paused := range []string{"", "b", jobstore.GlobalScope} {
			if paused != "" {
				_, err := b.store.Pause(ctx, pauseReq(paused, jobstore.PauseDrain, "plan test", "alice"))
				require.NoError(t, err)
			}
			plan := explain(t, b, jobstore.PinnedPlanSQL, jobstore.ClaimSQL,
				[]string{"a", "b"}, 100, slots("w", 100), "30 seconds")
			plan.requireWalksIndex(t, "CTE picked", paused)
			// Around a cursor: every range walks the index in order.
			for sql, walks := range map[string][]string{
				jobstore.ClaimAfterSQL:  {"CTE same_priority", "CTE lower_priority"},
				jobstore.ClaimBeforeSQL: {"CTE higher_priority", "CTE same_priority"},
			} {
				around := explain(t, b, jobstore.PinnedPlanSQL, sql,
					[]string{"a", "b"}, 100, slots("w", 100), "30 seconds", int16(5), time.Now(), [16]byte(uuid.New()))
				for _, walk := range walks {
					around.requireWalksIndex(t, walk, paused)
				}
				require.Less(t, around.cost, 1e9, "paused=%q", paused)
			}
			// With a limited topic: both heads walk the index in order; only
			// their merge (at most a few batches of rows, in picked) is
			// sorted.
			limited := explain(t, b, jobstore.PinnedPlanSQL, jobstore.ClaimLimitedSQL,
				[]string{"a", "b"}, 100, slots("w", 100), "30 seconds")
			for _, head := range []string{"CTE open_head", "CTE limited_head"} {
				limited.requireWalksIndex(t, head, paused)
			}
			require.Less(t, limited.cost, 1e9, "paused=%q", paused)
			// enable_seqscan=off prices any seq scan at 1e10; a plan that
			// cheap has none.
			require.Less(t, plan.cost, 1e9, "paused=%q", paused)
		}
	})

	t.Run("NeverCompilesTheClaimWithJIT", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.Insert(ctx, []pulsetype.NewJob{newJob("a", 5)})
		require.NoError(t, err)
		// A million-row backlog prices the claim above jit_above_cost;
		// here a zero threshold stands in for it.
		force := "SET LOCAL jit_above_cost = 0"
		args := []any{[]string{"a"}, 100, slots("w", 100), "30 seconds"}
		plan := explain(t, b, force, jobstore.ClaimSQL, args...)
		if !strings.Contains(plan.text, `"JIT"`) {
			msg := "this Postgres does not compile with JIT (no llvmjit), so the test cannot see the claim keep JIT off; " +
				"use a build with JIT (Debian's postgresql packages have it)"
			if testtool.Skipped("llvmjit") {
				t.Skip(msg + "; skipped because " + testtool.EnvSkip + " lists llvmjit")
			}
			t.Fatal(msg + ", or set " + testtool.EnvSkip + "=llvmjit")
		}
		plan = explain(t, b, force+"; "+jobstore.PinnedPlanSQL, jobstore.ClaimSQL, args...)
		require.NotContains(t, plan.text, `"JIT"`, "the queue-head settings turn JIT off")
	})
}

func TestHeartbeatReportsQuiesce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := insertRow(t, b.pool, rowOpts{Topic: "a", Status: pulsetype.StatusRunning, LockedBy: "w"})
	other := insertRow(t, b.pool, rowOpts{Topic: "other", Status: pulsetype.StatusRunning, LockedBy: "w"})
	refs := []pulsetype.AttemptRef{{ID: a, Attempt: 1}, {ID: other, Attempt: 1}}
	beat := func() []pulsetype.Beat {
		beats, err := b.store.Heartbeat(ctx, "w", refs, ttl)
		require.NoError(t, err)
		require.Len(t, beats, 2)
		for _, bt := range beats {
			require.True(t, bt.LeaseHeld, "a paused scope's leases keep being renewed")
		}
		return beats
	}
	beats := beat()
	require.Equal(t, "a", beats[0].Topic)
	require.False(t, beats[0].Quiesced)

	_, err := b.store.Pause(ctx, pauseReq("a", jobstore.PauseDrain, "x", "alice"))
	require.NoError(t, err)
	beats = beat()
	require.False(t, beats[0].Quiesced, "drain lets running jobs run")

	_, err = b.store.Pause(ctx, pauseReq("a", jobstore.PauseQuiesce, "x", "alice"))
	require.NoError(t, err)
	beats = beat()
	require.True(t, beats[0].Quiesced)
	require.False(t, beats[1].Quiesced)

	_, err = b.store.Pause(ctx, pauseReq(jobstore.GlobalScope, jobstore.PauseQuiesce, "all", "alice"))
	require.NoError(t, err)
	_, err = b.store.Resume(ctx, "a", "alice")
	require.NoError(t, err)
	beats = beat()
	require.True(t, beats[0].Quiesced)
	require.True(t, beats[1].Quiesced)

	_, err = b.store.Resume(ctx, jobstore.GlobalScope, "alice")
	require.NoError(t, err)
	beats = beat()
	require.False(t, beats[0].Quiesced)
	require.False(t, beats[1].Quiesced)
}

func TestQueueCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertQueue(t, b)

	got, err := b.store.QueueCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"a": 4}, got.Queued)
	require.Equal(t, map[string]int64{"a": 1, "b": 2}, got.Running)
	q, r := got.Totals()
	require.EqualValues(t, 4, q)
	require.EqualValues(t, 3, r)

	requireCountsReadNoFinishedJob(t, b, jobstore.QueueCountsSQL)
}

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Subplan   string     `json:"Subplan Name"`
	IndexName string     `json:"Index Name"`
	TotalCost float64    `json:"Total Cost"`
	Plans     []planNode `json:"Plans"`
}

// nodes lists the node and its descendants as "type index".
func (n *planNode) nodes() []string {
	out := []string{strings.TrimSpace(n.NodeType + " " + n.IndexName)}
	for i := range n.Plans {
		out = append(out, n.Plans[i].nodes()...)
	}
	return out
}

// find returns the subplan called name.
func (n *planNode) find(name string) *planNode {
	if n.Subplan == name {
		return n
	}
	for i := range n.Plans {
		if f := n.Plans[i].find(name); f != nil {
			return f
		}
	}
	return nil
}

type plan struct {
	planNode
	text string
	cost float64
}

// requireWalksIndex requires that the subplan called name reads
// jobs_claim_idx in order: an index scan of it, no sequential scan and no
// sort. paused names the pause scope the plan was made under.
func (p plan) requireWalksIndex(t *testing.T, name, paused string) {
	t.Helper()
	walk := p.find(name)
	require.NotNil(t, walk, "no %s in %s", name, p.text)
	require.Contains(t, walk.nodes(), "Index Scan jobs_claim_idx", "%s, paused=%q", name, paused)
	for _, n := range walk.nodes() {
		require.NotContains(t, n, "Seq Scan", "%s, paused=%q", name, paused)
		require.NotContains(t, n, "Sort", "%s, paused=%q: the claim must walk the index in order, not sort the backlog", name, paused)
	}
}

// explain runs EXPLAIN (FORMAT JSON) of sql under the plan settings the
// store uses for it, in a transaction that is rolled back.
func explain(t *testing.T, b *testBundle, settings, sql string, args ...any) plan {
	t.Helper()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // the rollback at the end of the test only releases the transaction
	_, err = tx.Exec(ctx, settings)
	require.NoError(t, err)
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&raw))
	var parsed []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(raw, &parsed))
	return plan{planNode: parsed[0].Plan, text: string(raw), cost: parsed[0].Plan.TotalCost}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, json.Unmarshal([]byte(s), &n))
	return n
}

// TestHeartbeatAnswersEachBeatOfAMixedBatch: one heartbeat of beats in
// every state — held, held twice (a duplicate), someone else's, canceled,
// a stale attempt, an unknown id — answers each in the batch's order with
// its own lease, cancel and topic. The statement returns the extended
// leases and the per-beat rows separately and Heartbeat matches them.
func TestHeartbeatAnswersEachBeatOfAMixedBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := insertRow(t, b.pool, rowOpts{Topic: "mixed.held", Status: pulsetype.StatusRunning, LockedBy: "w"})
	foreign := insertRow(t, b.pool, rowOpts{Topic: "mixed.foreign", Status: pulsetype.StatusRunning, LockedBy: "other"})
	canceled := insertRow(t, b.pool, rowOpts{Topic: "mixed.canceled", Status: pulsetype.StatusRunning, LockedBy: "w"})
	_, err := b.store.Cancel(ctx, canceled)
	require.NoError(t, err)
	stale := insertRow(t, b.pool, rowOpts{Topic: "mixed.stale", Status: pulsetype.StatusRunning, LockedBy: "w"})
	unknown := uuid.Must(uuid.NewV7())

	refs := []pulsetype.AttemptRef{
		{ID: unknown, Attempt: 1},
		{ID: held, Attempt: 1},
		{ID: foreign, Attempt: 1},
		{ID: canceled, Attempt: 1},
		{ID: stale, Attempt: 2},
		{ID: held, Attempt: 1},
	}
	beats, err := b.store.Heartbeat(ctx, "w", refs, time.Hour)
	require.NoError(t, err)
	require.Len(t, beats, len(refs))
	type answer struct {
		held, canceled bool
		topic          string
	}
	want := []answer{
		{false, false, ""},
		{true, false, "mixed.held"},
		{false, false, "mixed.foreign"},
		{false, true, "mixed.canceled"},
		{false, false, "mixed.stale"},
		{true, false, "mixed.held"},
	}
	for i, bt := range beats {
		require.Equal(t, refs[i], bt.Ref, "beat %d answers its own ref", i)
		require.Equal(t, want[i], answer{bt.LeaseHeld, bt.Canceled, bt.Topic}, "beat %d (%s)", i, bt.Ref.ID)
		if bt.LeaseHeld {
			require.WithinDuration(t, time.Now().Add(time.Hour), bt.LeaseUntil, time.Minute, "beat %d's new lease", i)
		}
	}
	job, err := b.store.Get(ctx, foreign)
	require.NoError(t, err)
	require.True(t, job.LeaseUntil.Before(time.Now().Add(30*time.Minute)), "another worker's lease is not extended")
}
