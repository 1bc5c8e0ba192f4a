package api_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/pulsequeue/pulse/pkg/errtext"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/api"
)

// gatedStore is the real store with its first report statement held until
// release is closed, so the calls that arrive meanwhile fold into the next
// statement; it counts report statements.
type gatedStore struct {
	*jobstore.Store
	statements atomic.Int64
	entered    chan struct{}
	release    chan struct{}
}

func (g *gatedStore) Report(ctx context.Context, worker string, results []pulsetype.Result) ([]pulsetype.Ack, error) {
	if g.statements.Add(1) == 1 {
		close(g.entered)
		<-g.release
	}
	return g.Store.Report(ctx, worker, results)
}

// leaseEach inserts one job per worker and claims it for that worker.
func leaseEach(t *testing.T, store *jobstore.Store, workers ...string) map[string]pulsetype.Claimed {
	t.Helper()
	insert(t, store, len(workers))
	claimed, err := store.Claim(t.Context(), []string{"t"}, workers, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, len(workers))
	byWorker := make(map[string]pulsetype.Claimed, len(workers))
	for _, c := range claimed {
		byWorker[c.WorkerID] = c
	}
	return byWorker
}

type foldedCall struct {
	acks    []pulsetype.Ack
	refused []error
	err     error
}

// fold runs calls through one batcher so that all of them share one flush
// (behind a decoy call that holds the first statement) and returns each
// call's answer and how many statements settled them.
func fold(t *testing.T, store *jobstore.Store, calls [][]pulsetype.Result) ([]foldedCall, int) {
	t.Helper()
	decoy := leaseEach(t, store, "decoy")["decoy"]
	gs := &gatedStore{Store: store, entered: make(chan struct{}), release: make(chan struct{})}
	b := api.NewReportBatcher(gs, 1, 2000)
	decoyDone := make(chan error, 1)
	go func() {
		_, _, err := b.Report(t.Context(), []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: decoy.ID, Attempt: decoy.Attempt},
			Outcome: pulsetype.OutcomeComplete, Worker: "decoy"}})
		decoyDone <- err
	}()
	<-gs.entered
	out := make([]foldedCall, len(calls))
	total := 0
	var wg sync.WaitGroup
	for i, c := range calls {
		total += len(c)
		wg.Go(func() {
			acks, refused, err := b.Report(t.Context(), c)
			out[i] = foldedCall{acks, refused, err}
		})
	}
	require.Eventually(t, func() bool { return api.QueuedResults(b) == total }, 10*time.Second, time.Millisecond)
	close(gs.release)
	wg.Wait()
	require.NoError(t, <-decoyDone)
	return out, int(gs.statements.Load()) - 1
}

func failure(c pulsetype.Claimed, text string) pulsetype.Result {
	return pulsetype.Result{Ref: pulsetype.AttemptRef{ID: c.ID, Attempt: c.Attempt}, Outcome: pulsetype.OutcomeFail, Error: text, Worker: c.WorkerID}
}

// storedError reads the job's status and the error text of its last failure.
func storedError(t *testing.T, store *jobstore.Store, id uuid.UUID) (status, text string) {
	t.Helper()
	require.NoError(t, store.Pool().QueryRow(t.Context(),
		`SELECT status, COALESCE(errors->-1->>'error', '') FROM jobs WHERE id = $1`, id).Scan(&status, &text))
	return status, text
}

func TestReportBatcherIsolatesWhatPostgresRefuses(t *testing.T) {
	t.Parallel()

	t.Run("HappyPathIsOneStatement", func(t *testing.T) {
		t.Parallel()
		store := jobstore.New(pgtest.Pool(t))
		workers := []string{"w0", "w1", "w2", "w3", "w4"}
		leased := leaseEach(t, store, workers...)
		calls := make([][]pulsetype.Result, len(workers))
		for i, w := range workers {
			calls[i] = []pulsetype.Result{failure(leased[w], "boom "+w)}
		}
		got, statements := fold(t, store, calls)
		require.Equal(t, 1, statements, "five workers' results, one statement")
		for i, c := range got {
			require.NoError(t, c.err)
			require.Nil(t, c.refused)
			require.True(t, c.acks[0].Accepted)
			require.Equal(t, pulsetype.StatusRetrying, c.acks[0].Status)
			status, text := storedError(t, store, leased[workers[i]].ID)
			require.Equal(t, "RETRYING", status)
			require.Equal(t, "boom "+workers[i], text)
		}
	})

	t.Run("OnlyTheRefusedResultsFailAndEveryOtherSettles", func(t *testing.T) {
		t.Parallel()
		store := jobstore.New(pgtest.Pool(t))
		// A constraint that refuses one error text, standing in for any row
		// Postgres will not store; and a NUL (the batcher does not
		// sanitize: the handler does), which Postgres refuses as a value.
		_, err := store.Pool().Exec(t.Context(),
			`ALTER TABLE jobs ADD CONSTRAINT test_refuses_poison CHECK (NOT errors @> '[{"error": "poison"}]') NOT VALID`)
		require.NoError(t, err)

		var workers []string
		for i := range 16 {
			workers = append(workers, fmt.Sprintf("w%02d", i))
		}
		leased := leaseEach(t, store, append(workers, "w03b")...)
		culprits := map[string]string{"w03": "poison", "w11": "nul\x00byte"}
		var calls [][]pulsetype.Result
		for _, w := range workers {
			text := "boom " + w
			if c, ok := culprits[w]; ok {
				text = c
			}
			call := []pulsetype.Result{failure(leased[w], text)}
			if w == "w03" { // a call whose other result is fine
				call = append(call, failure(leased["w03b"], "boom w03b"))
			}
			calls = append(calls, call)
		}
		got, statements := fold(t, store, calls)
		require.Greater(t, statements, 1, "the refused statement was bisected")

		for i, w := range workers {
			c := got[i]
			require.NoError(t, c.err, w)
			if _, culprit := culprits[w]; !culprit {
				require.Nil(t, c.refused, w)
				require.True(t, c.acks[0].Accepted, w)
				status, text := storedError(t, store, leased[w].ID)
				require.Equal(t, "RETRYING", status, w)
				require.Equal(t, "boom "+w, text, w)
				continue
			}
			require.Len(t, c.refused, len(calls[i]), w)
			require.Error(t, c.refused[0], w)
			require.True(t, jobstore.IsDataError(c.refused[0]), "%s: %v", w, c.refused[0])
			require.False(t, c.acks[0].Accepted, w)
			status, text := storedError(t, store, leased[w].ID)
			require.Equal(t, "RUNNING", status, "%s: nothing was written for the refused result", w)
			require.Empty(t, text, w)
		}
		// The culprit's call-mate settled.
		require.NoError(t, got[3].refused[1])
		require.True(t, got[3].acks[1].Accepted)
		status, _ := storedError(t, store, leased["w03b"].ID)
		require.Equal(t, "RETRYING", status)

		// The throughput rollup, counted in the same statements, holds
		// exactly what settled: the decoy's completion and every failure
		// but the two refused.
		var completed, failed int64
		require.NoError(t, store.Pool().QueryRow(t.Context(),
			`SELECT sum(completed)::bigint, sum(failed)::bigint FROM job_throughput WHERE topic = 't'`).Scan(&completed, &failed))
		require.Equal(t, int64(1), completed)
		require.Equal(t, int64(len(workers)-len(culprits)+1), failed)
	})
}

// Error text is data: whatever a handler's error says, its report settles,
// stored sanitized, and the reports folded with it settle too.
func TestReportResultSettlesWhateverTheErrorText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	texts := map[string]string{
		"nul":      "connection reset\x00 by peer",
		"invalid":  "bad bytes \xff\xfe\xc3 here",                 // only a non-Go client can send this; called directly
		"longrune": strings.Repeat("€", 4000),                     // 12,000 bytes; 8192 falls inside a rune
		"nullong":  "\x00" + strings.Repeat("日本語", 2000) + "\x00", // both at once
		"plain1":   "smtp timeout",
		"plain2":   "smtp timeout",
		"plain3":   "",
	}
	var workers []string
	for w := range texts {
		workers = append(workers, w)
	}
	leased := leaseEach(t, b.store, workers...)

	var wg sync.WaitGroup
	var mu sync.Mutex
	resps := make(map[string]*pulsev1.ReportResultResponse, len(workers))
	errs := make(map[string]error, len(workers))
	for _, w := range workers {
		wg.Go(func() {
			c := leased[w]
			req := &pulsev1.ReportResultRequest{WorkerId: w, Results: []*pulsev1.JobResult{{
				JobId: c.ID.String(), Attempt: c.Attempt, Outcome: pulsev1.Outcome_OUTCOME_FAIL, Error: texts[w]}}}
			var resp *pulsev1.ReportResultResponse
			var err error
			if utf8.ValidString(texts[w]) {
				resp, err = b.client.ReportResult(t.Context(), req)
			} else {
				resp, err = b.svc.ReportResult(t.Context(), req)
			}
			mu.Lock()
			resps[w], errs[w] = resp, err
			mu.Unlock()
		})
	}
	wg.Wait()

	for _, w := range workers {
		require.NoError(t, errs[w], w)
		ack := resps[w].GetAcks()[0]
		require.EqualValues(t, codes.OK, ack.GetCode(), "%s: %s", w, ack.GetMessage())
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_RETRYING, ack.GetStatus(), w)
		status, text := storedError(t, b.store, leased[w].ID)
		require.Equal(t, "RETRYING", status, w)
		want := errtext.Sanitize(texts[w], api.MaxErrorBytes)
		if want == "" {
			want = "(no error message)"
		}
		require.Equal(t, want, text, w)
		require.True(t, utf8.ValidString(text), w)
		require.NotContains(t, text, "\x00", w)
		require.LessOrEqual(t, len(text), api.MaxErrorBytes, w)
	}
	_, text := storedError(t, b.store, leased["longrune"].ID)
	require.True(t, strings.HasSuffix(text, errtext.TruncatedMark))
}
