package e2e_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pulsequeue/pulse/deploy/localfleet"
	"github.com/pulsequeue/pulse/pkg/pulse"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// TestAWorkerActsOnlyAsItselfAcrossTheFleet (ADR-0012): real binaries, two
// gateways, authentication on. Alice's worker holds two jobs; bob, a
// worker too, reads their id, attempt and locked_by from the API as a
// producer can, and tries to extend, complete, fail and dead-letter them
// through both gateways: nothing changes. Operators cannot act as workers.
// A job whose topic no worker serves says so, and says when one last did.
func TestAWorkerActsOnlyAsItselfAcrossTheFleet(t *testing.T) {
	t.Parallel()
	f := upPauseFleet(t, localfleet.Options{Gateways: 2, Env: map[string]string{
		"PULSE_AUTH_USERS":         "ops:operator:ops-pw,pat:producer:pat-pw,alice:worker:alice-pw,bob:worker:bob-pw",
		"PULSE_PRESENCE_INTERVAL":  "200ms",
		"PULSE_PRESENCE_TTL":       "2s",
		"PULSE_HEARTBEAT_INTERVAL": "1s",
		"PULSE_LEASE_TTL":          "10s",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := f.newClient(pulse.WithUserPass("pat", "pat-pw"))
	const topic = "e2e.identity"

	type waiting struct {
		Reason         string     `json:"reason"`
		WorkerLastSeen *time.Time `json:"worker_last_seen"`
	}
	type jobView struct {
		Status   string   `json:"status"`
		Attempts int32    `json:"attempts"`
		LockedBy string   `json:"locked_by"`
		Errors   []any    `json:"errors"`
		Waiting  *waiting `json:"waiting"`
	}
	get := func(id string) jobView {
		t.Helper()
		var j jobView
		require.Equal(t, http.StatusOK, f.call(http.MethodGet, f.ControlHTTP+"/v1/jobs/"+id, "", "pat:pat-pw", &j))
		return j
	}

	// Nobody serves the topic yet, and nobody ever has.
	first := f.enqueue(ctx, client, topic, 1)[0]
	w := get(first).Waiting
	require.Equal(t, "no_worker", w.Reason)
	require.Nil(t, w.WorkerLastSeen)

	// Alice's worker takes two jobs and holds them until released.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)
	alice, err := pulse.NewWorker([]string{f.GatewayAddrs[0]}, pulse.WithWorkerID("alice-w"), pulse.WithConcurrency(2),
		pulse.WithUserPass("alice", "alice-pw"), pulse.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	alice.Register(topic, func(ctx context.Context, job *pulse.Job) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	aliceCtx, stopAlice := context.WithCancel(context.Background())
	aliceDone := make(chan struct{})
	go func() { defer close(aliceDone); _ = alice.Run(aliceCtx) }()
	t.Cleanup(func() { stopAlice(); <-aliceDone })

	held := append([]string{first}, f.enqueue(ctx, client, topic, 1)...)
	require.Eventually(t, func() bool { return f.count(`topic = $1 AND status = 'RUNNING'`, topic) == 2 }, time.Minute, 10*time.Millisecond)
	queued := f.enqueue(ctx, client, topic, 1)[0]
	require.Equal(t, "queued", get(queued).Waiting.Reason, "a worker serves the topic; it is busy")

	before := map[string]jobView{}
	var refs []*pulsev1.JobRef
	var all []*pulsev1.JobResult
	outcomes := []pulsev1.Outcome{pulsev1.Outcome_OUTCOME_COMPLETE, pulsev1.Outcome_OUTCOME_FAIL_PERMANENT}
	for i, id := range held {
		j := get(id)
		require.Equal(t, "RUNNING", j.Status)
		require.Equal(t, "alice/alice-w", j.LockedBy, "locked_by names the identity and the worker id")
		before[id] = j
		refs = append(refs, &pulsev1.JobRef{JobId: id, Attempt: j.Attempts})
		all = append(all, &pulsev1.JobResult{JobId: id, Attempt: j.Attempts, Outcome: outcomes[i], Error: "stolen"})
		all = append(all, &pulsev1.JobResult{JobId: id, Attempt: j.Attempts, Outcome: pulsev1.Outcome_OUTCOME_FAIL, Error: "stolen"})
	}

	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, addr := range f.GatewayAddrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		gw := pulsev1.NewDispatchServiceClient(conn)
		asBob := metadata.AppendToOutgoingContext(ctx, "authorization", basic("bob", "bob-pw"))
		for _, worker := range []string{"alice-w", "alice/alice-w"} {
			hb, err := gw.Heartbeat(asBob, &pulsev1.HeartbeatRequest{WorkerId: worker, Jobs: refs})
			require.NoError(t, err, addr)
			for _, r := range hb.GetResults() {
				require.False(t, r.GetLeaseHeld(), "%s: bob as %q extended alice's lease", addr, worker)
			}
			resp, err := gw.ReportResult(asBob, &pulsev1.ReportResultRequest{WorkerId: worker, Results: all})
			require.NoError(t, err, addr)
			for _, ack := range resp.GetAcks() {
				require.EqualValues(t, codes.FailedPrecondition, ack.GetCode(), "%s: bob as %q settled alice's job", addr, worker)
			}
		}
		asOps := metadata.AppendToOutgoingContext(ctx, "authorization", basic("ops", "ops-pw"))
		_, err = gw.Heartbeat(asOps, &pulsev1.HeartbeatRequest{WorkerId: "alice-w", Jobs: refs})
		require.Equal(t, codes.PermissionDenied, status.Code(err), err)
		_, err = gw.ReportResult(asOps, &pulsev1.ReportResultRequest{WorkerId: "alice-w", Results: all})
		require.Equal(t, codes.PermissionDenied, status.Code(err), err)

		// Nor can bob open a stream as alice's worker id, on either gateway.
		stream, err := gw.StreamJobs(asBob)
		require.NoError(t, err)
		if err := stream.Send(&pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{Open: &pulsev1.OpenStream{
			WorkerId: "alice-w", Topics: []string{topic}, Concurrency: 1}}}); err != nil && !errors.Is(err, io.EOF) {
			require.NoError(t, err)
		}
		_, err = stream.Recv()
		require.Equal(t, codes.AlreadyExists, status.Code(err), err)
	}

	// Through the SDK, a worker every gateway turns away stops at once and
	// says why, instead of reconnecting forever: bob as alice's worker id,
	// a wrong password, an operator's credentials.
	for name, c := range map[string]struct {
		id, user, pass string
		code           codes.Code
	}{
		"AnotherIdentitysWorkerID": {"alice-w", "bob", "bob-pw", codes.AlreadyExists},
		"WrongPassword":            {"mallory-w", "bob", "not-bob-pw", codes.Unauthenticated},
		"NotAWorker":               {"ops-w", "ops", "ops-pw", codes.PermissionDenied},
	} {
		w, err := pulse.NewWorker(f.GatewayAddrs, pulse.WithWorkerID(c.id), pulse.WithUserPass(c.user, c.pass),
			pulse.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		require.NoError(t, err)
		w.Register(topic, func(context.Context, *pulse.Job) error { return errors.New("must never run") })
		runCtx, stopRun := context.WithTimeout(ctx, time.Minute)
		err = w.Run(runCtx)
		require.NoError(t, runCtx.Err(), "%s: Run returned on its own", name)
		stopRun()
		require.ErrorIs(t, err, pulse.ErrWorkerRefused, name)
		require.Equal(t, c.code, status.Code(err), "%s: %v", name, err)
	}
	for _, id := range held {
		j := get(id)
		require.Equal(t, "RUNNING", j.Status, "bob changed nothing")
		require.Equal(t, before[id].Attempts, j.Attempts)
		require.Empty(t, j.Errors)
	}

	// Alice finishes her work; then she leaves, and the topic remembers.
	releaseAll()
	require.Eventually(t, func() bool { return f.count(`topic = $1 AND status = 'COMPLETED'`, topic) == 3 }, time.Minute, 10*time.Millisecond)
	stopAlice()
	<-aliceDone
	later := f.enqueue(ctx, client, topic, 1)[0]
	require.Eventually(t, func() bool {
		w := get(later).Waiting
		return w != nil && w.Reason == "no_worker" && w.WorkerLastSeen != nil
	}, 30*time.Second, 50*time.Millisecond, "no worker serves the topic since alice left")
}
