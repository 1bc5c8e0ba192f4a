package queuedepth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/metrics"
)

// fakeStore answers with depths after advancing clock by cost, the time the
// count takes; calls counts the counts.
type fakeStore struct {
	depths []jobstore.QueueDepth
	err    error
	clock  *fakeClock
	cost   time.Duration
	calls  int
}

func (f *fakeStore) QueueDepths(context.Context) ([]jobstore.QueueDepth, error) {
	f.calls++
	if f.clock != nil {
		f.clock.t = f.clock.t.Add(f.cost)
	}
	return f.depths, f.err
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

type fakeGauge struct {
	depths map[[2]string]float64
	at     time.Time
	took   time.Duration
}

func (g *fakeGauge) ReplaceQueueDepth(samples []metrics.TopicSample) {
	clear(g.depths)
	for _, s := range samples {
		g.depths[[2]string{s.Topic, s.Labels[0]}] = s.Value
	}
}

func (g *fakeGauge) QueueDepthCounted(at time.Time, took time.Duration) { g.at, g.took = at, took }

// TestRefreshZeroesEmptiedStatusesAndDropsEmptiedTopics: a topic with live
// jobs has a series for each live status; a topic without any has none.
func TestRefreshZeroesEmptiedStatusesAndDropsEmptiedTopics(t *testing.T) {
	store := &fakeStore{depths: []jobstore.QueueDepth{
		{Topic: "a", Status: pulsetype.StatusPending, Jobs: 3},
		{Topic: "b", Status: pulsetype.StatusRunning, Jobs: 1},
	}}
	g := &fakeGauge{depths: map[[2]string]float64{}}
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	store.clock, store.cost = clock, time.Millisecond
	r := New(store, g)
	r.now = clock.now
	require.NoError(t, r.Refresh(t.Context()))
	require.Equal(t, map[[2]string]float64{
		{"a", "PENDING"}: 3, {"a", "RETRYING"}: 0, {"a", "RUNNING"}: 0,
		{"b", "PENDING"}: 0, {"b", "RETRYING"}: 0, {"b", "RUNNING"}: 1,
	}, g.depths)

	store.depths = []jobstore.QueueDepth{{Topic: "a", Status: pulsetype.StatusRunning, Jobs: 5}}
	clock.t = clock.t.Add(IntervalDefault)
	require.NoError(t, r.Refresh(t.Context()))
	require.Equal(t, 2, store.calls)
	require.Equal(t, map[[2]string]float64{{"a", "PENDING"}: 0, {"a", "RETRYING"}: 0, {"a", "RUNNING"}: 5}, g.depths,
		"b has no live job: its series are gone")
}

// TestRefreshBoundsTheCountsShareOfTime: a count that took d is not
// repeated before d / MaxDuty has passed since it began, whatever the
// loop's interval; a cheap count runs on every tick; the gauge says when
// the count ran and how long it took.
func TestRefreshBoundsTheCountsShareOfTime(t *testing.T) {
	ctx := t.Context()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	store := &fakeStore{clock: clock, depths: []jobstore.QueueDepth{{Topic: "a", Status: pulsetype.StatusPending, Jobs: 7}}}
	g := &fakeGauge{depths: map[[2]string]float64{}}
	r := New(store, g)
	r.now = clock.now
	tick := func(d time.Duration) {
		t.Helper()
		clock.t = clock.t.Add(d)
		require.NoError(t, r.Refresh(ctx))
	}

	// Cheap counts (1 ms, so 50 ms apart at most) run on every 5 s tick.
	store.cost = time.Millisecond
	for range 3 {
		tick(5 * time.Second)
	}
	require.Equal(t, 3, store.calls)
	require.Equal(t, time.Millisecond, g.took)

	// A 400 ms count (a large backlog) holds off the next for 20 s from
	// its start: the ticks at +5, +10 and +15 s skip, +20 s counts.
	store.cost = 400 * time.Millisecond
	tick(5 * time.Second)
	began := clock.t.Add(-store.cost)
	require.Equal(t, 4, store.calls)
	require.Equal(t, began, g.at)
	require.Equal(t, 400*time.Millisecond, g.took)
	for range 3 {
		tick(5 * time.Second)
	}
	require.Equal(t, 4, store.calls, "a count within 20 s of a 400 ms one")
	require.Equal(t, began, g.at, "skipped ticks leave the timestamp alone")
	tick(5*time.Second - store.cost)
	require.Equal(t, 5, store.calls)

	// A failed count is held off by its own cost too, and leaves the gauge
	// (depths and timestamp) as the last success set it.
	store.err, store.cost = errors.New("canceling statement due to statement timeout"), 2*time.Second
	clock.t = clock.t.Add(30 * time.Second)
	require.Error(t, r.Refresh(ctx))
	lastGood := g.at
	store.err, store.cost = nil, time.Millisecond
	tick(90 * time.Second)
	require.Equal(t, 6, store.calls, "within 100 s of a 2 s failed count")
	require.Equal(t, lastGood, g.at)
	tick(10 * time.Second)
	require.Equal(t, 7, store.calls)
	require.Equal(t, map[[2]string]float64{{"a", "PENDING"}: 7, {"a", "RETRYING"}: 0, {"a", "RUNNING"}: 0}, g.depths)
}
