package pulsehttp_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsehttp"
)

// TestWaitWorkerLastSeen: worker_last_seen is absent unless the reason is
// no_worker, and then a time or null (no worker ever served the topic).
func TestWaitWorkerLastSeen(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		wait pulsehttp.Wait
		want string
	}{
		{pulsehttp.Wait{Reason: "queued"}, `{"reason":"queued","ahead":0}`},
		{pulsehttp.Wait{Reason: "no_worker", WorkerLastSeen: &pulsehttp.LastSeen{}}, `{"reason":"no_worker","ahead":0,"worker_last_seen":null}`},
		{pulsehttp.Wait{Reason: "no_worker", WorkerLastSeen: &pulsehttp.LastSeen{At: &at}}, `{"reason":"no_worker","ahead":0,"worker_last_seen":"2026-11-23T12:00:00Z"}`},
	} {
		b, err := json.Marshal(c.wait)
		require.NoError(t, err)
		require.JSONEq(t, c.want, string(b))
		var back pulsehttp.Wait
		require.NoError(t, json.Unmarshal(b, &back))
		if c.wait.WorkerLastSeen != nil && c.wait.WorkerLastSeen.At != nil {
			require.True(t, at.Equal(*back.WorkerLastSeen.At))
		}
	}
}

// TestScopeStatusFlattens: a scope's status is its state's fields and its
// counts side by side, as GET /v1/dispatch has always shown them.
func TestScopeStatusFlattens(t *testing.T) {
	b, err := json.Marshal(pulsehttp.ScopeStatus{ScopeState: pulsehttp.ScopeState{Scope: "*", Mode: "drain"}, Queued: 3, Drained: true})
	require.NoError(t, err)
	require.JSONEq(t, `{"scope":"*","paused":false,"mode":"drain","reason":"","actor":"","paused_at":null,"until":null,"updated_at":null,"version":0,"queued":3,"running":0,"drained":true}`, string(b))
}
