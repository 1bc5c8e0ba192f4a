package queuedepth

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

type fakeStore struct{ depths []jobstore.QueueDepth }

func (f *fakeStore) QueueDepths(context.Context) ([]jobstore.QueueDepth, error) {
	return f.depths, nil
}

type fakeGauge map[[2]string]float64

func (g fakeGauge) SetQueueDepth(topic, status string, jobs float64) {
	g[[2]string{topic, status}] = jobs
}

func TestRefreshZeroesEmptiedGroups(t *testing.T) {
	store := &fakeStore{depths: []jobstore.QueueDepth{
		{Topic: "a", Status: jobstore.StatusPending, Jobs: 3},
		{Topic: "b", Status: jobstore.StatusRunning, Jobs: 1},
	}}
	g := fakeGauge{}
	r := New(store, g)
	require.NoError(t, r.Refresh(context.Background()))
	require.Equal(t, fakeGauge{{"a", "PENDING"}: 3, {"b", "RUNNING"}: 1}, g)

	store.depths = []jobstore.QueueDepth{{Topic: "a", Status: jobstore.StatusPending, Jobs: 5}}
	require.NoError(t, r.Refresh(context.Background()))
	require.Equal(t, fakeGauge{{"a", "PENDING"}: 5, {"b", "RUNNING"}: 0}, g)
}
