package api_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/pulsequeue/pulse/pkg/errtext"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/api"
)

// The fuzz targets call the handlers in process, as the gRPC server would
// after decoding, against a real database: they reach what a Go client
// cannot send (invalid UTF-8 in string fields). Each asserts that a
// request is never answered Internal or Unknown, that a refused request
// (or a refused result) writes nothing, and that what is accepted can
// actually be stored and claimed. Seed corpora: testdata/fuzz/<target>/.

// fuzzWorker holds the job each Heartbeat/ReportResult iteration leases.
const fuzzWorker = "fuzz-worker"

// requireRefused checks a handler error: INVALID_ARGUMENT naming a field.
func requireRefused(t *testing.T, err error) {
	t.Helper()
	code := apierr.GRPCStatus(err).Code()
	require.NotContains(t, []codes.Code{codes.Internal, codes.Unknown}, code, "%v", err)
	require.Equal(t, codes.InvalidArgument, code, "%v", err)
	require.NotEmpty(t, apierr.FieldOf(err), "a refusal names its field: %v", err)
}

// requireWire checks that the response can be marshalled: one the wire
// cannot carry would reach the worker as Internal.
func requireWire(t *testing.T, m proto.Message) {
	t.Helper()
	_, err := proto.Marshal(m)
	require.NoError(t, err)
}

// snapshot digests every table of the schema, to show that a refused
// request wrote nothing.
func snapshot(t *testing.T, b *testBundle) string {
	t.Helper()
	ctx := context.Background()
	rows, err := b.store.Pool().Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var sb strings.Builder
	for _, table := range tables {
		var digest string
		require.NoError(t, b.store.Pool().QueryRow(ctx, `SELECT md5(COALESCE(string_agg(r::text, E'\n' ORDER BY r::text), '')) FROM `+
			pgx.Identifier{table}.Sanitize()+` AS r`).Scan(&digest))
		sb.WriteString(table + "=" + digest + ";")
	}
	return sb.String()
}

// leaseOne inserts a job and claims it for fuzzWorker; it is deleted when
// the iteration ends, so the table stays small however long the fuzzing.
func leaseOne(t *testing.T, b *testBundle) pulsetype.Claimed {
	t.Helper()
	c := leaseEach(t, b.store, fuzzWorker)[fuzzWorker]
	t.Cleanup(func() { deleteJob(t, b, c.ID) })
	return c
}

// deleteJob removes an iteration's job: canceled first unless settled
// (only a finished job may be deleted), and checked without FailNow, since
// it runs in cleanups.
func deleteJob(t *testing.T, b *testBundle, id uuid.UUID) {
	ctx := context.Background()
	_, _ = b.store.Cancel(ctx, id) // refused, harmlessly, when already finished
	if _, err := b.store.Pool().Exec(ctx, `DELETE FROM jobs WHERE id = $1`, id); err != nil {
		t.Errorf("delete job %s: %v", id, err)
	}
}

// stuckState says what a test that waited in vain for a job can see: the
// job's row, the registry and the pool (a claim waiting for a connection
// never times out).
func stuckState(b *testBundle, id uuid.UUID) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	workers, free := b.registry.Stats()
	st := b.store.Pool().Stat()
	var status, lockedBy string
	var attempts int32
	err := b.store.Pool().QueryRow(ctx, `SELECT status, attempts, COALESCE(locked_by, '') FROM jobs WHERE id = $1`, id).Scan(&status, &attempts, &lockedBy)
	return fmt.Sprintf("job %s %s attempt %d locked_by %q (read: %v); registry: %d workers, %d free slots; pool: %d acquired, %d idle of %d",
		id, status, attempts, lockedBy, err, workers, free, st.AcquiredConns(), st.IdleConns(), st.MaxConns())
}

// sameRef says whether a request's job id and attempt name c.
func sameRef(c pulsetype.Claimed, jobID string, attempt int32) bool {
	id, err := uuid.Parse(jobID)
	return err == nil && id == c.ID && attempt == c.Attempt
}

func FuzzHeartbeat(f *testing.F) {
	f.Add(fuzzWorker, true, "", int32(1))
	b := setup(f)
	f.Fuzz(func(t *testing.T, worker string, leased bool, jobID string, attempt int32) {
		c := leaseOne(t, b)
		if leased {
			jobID = c.ID.String()
		}
		req := &pulsev1.HeartbeatRequest{WorkerId: worker, Jobs: []*pulsev1.JobRef{{JobId: jobID, Attempt: attempt}}}
		before := snapshot(t, b)
		resp, err := b.svc.Heartbeat(t.Context(), req)
		if err != nil {
			requireRefused(t, err)
			require.Equal(t, before, snapshot(t, b), "a refused heartbeat wrote")
			return
		}
		requireWire(t, resp)
		require.Len(t, resp.GetResults(), 1)
		require.Equal(t, worker == fuzzWorker && sameRef(c, jobID, attempt), resp.GetResults()[0].GetLeaseHeld())
	})
}

func FuzzReportResult(f *testing.F) {
	f.Add(fuzzWorker, true, "", int32(1), int32(pulsev1.Outcome_OUTCOME_FAIL), "boom\x00")
	b := setup(f)
	f.Fuzz(func(t *testing.T, worker string, leased bool, jobID string, attempt, outcome int32, errText string) {
		c := leaseOne(t, b)
		if leased {
			jobID = c.ID.String()
		}
		req := &pulsev1.ReportResultRequest{WorkerId: worker, Results: []*pulsev1.JobResult{
			{JobId: jobID, Attempt: attempt, Outcome: pulsev1.Outcome(outcome), Error: errText}}}
		before := snapshot(t, b)
		resp, err := b.svc.ReportResult(t.Context(), req)
		if err != nil {
			requireRefused(t, err)
			require.Equal(t, before, snapshot(t, b), "a refused report wrote")
			return
		}
		requireWire(t, resp)
		require.Len(t, resp.GetAcks(), 1)
		ack := resp.GetAcks()[0]
		settles := worker == fuzzWorker && sameRef(c, jobID, attempt)
		if !settles {
			require.EqualValues(t, codes.FailedPrecondition, ack.GetCode(), ack.GetMessage())
			require.Equal(t, before, snapshot(t, b), "a fenced-off result wrote")
			return
		}
		// Error text is data: a result the fence accepts always settles.
		require.EqualValues(t, codes.OK, ack.GetCode(), ack.GetMessage())
		status, stored := storedError(t, b.store, c.ID)
		if pulsev1.Outcome(outcome) == pulsev1.Outcome_OUTCOME_COMPLETE {
			require.Equal(t, "COMPLETED", status)
			return
		}
		want := errtext.Sanitize(errText, api.MaxErrorBytes)
		if want == "" {
			want = "(no error message)"
		}
		require.Equal(t, want, stored)
	})
}

// streamStub is the server side of one StreamJobs stream, in process: the
// open message, then nothing until the stream's context ends or the worker
// half-closes (halfClose closed: Recv returns io.EOF).
type streamStub struct {
	grpc.ServerStream // not used by the handler; nil
	ctx               context.Context
	open              *pulsev1.StreamJobsRequest

	mu        sync.Mutex
	opened    bool
	sent      []*pulsev1.StreamJobsResponse
	welcomed  chan struct{}
	assigned  chan *pulsev1.Assignment
	halfClose chan struct{}
}

func newStreamStub(ctx context.Context, open *pulsev1.OpenStream) *streamStub {
	return &streamStub{ctx: ctx, open: &pulsev1.StreamJobsRequest{Msg: &pulsev1.StreamJobsRequest_Open{Open: open}},
		welcomed: make(chan struct{}), assigned: make(chan *pulsev1.Assignment, 64), halfClose: make(chan struct{})}
}

func (s *streamStub) Context() context.Context { return s.ctx }

func (s *streamStub) Recv() (*pulsev1.StreamJobsRequest, error) {
	s.mu.Lock()
	first := !s.opened
	s.opened = true
	s.mu.Unlock()
	if first {
		return s.open, nil
	}
	select {
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	case <-s.halfClose:
		return nil, io.EOF
	}
}

func (s *streamStub) Send(m *pulsev1.StreamJobsResponse) error {
	if _, err := proto.Marshal(m); err != nil {
		return err // the wire could not carry it
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, m)
	if m.GetWelcome() != nil {
		close(s.welcomed)
	}
	for _, a := range m.GetAssignments().GetJobs() {
		s.assigned <- a
	}
	return nil
}

func (s *streamStub) sentCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sent)
}

func FuzzStreamJobsOpen(f *testing.F) {
	f.Add("w1", "t", int32(2), int32(0))
	b := setup(f)
	f.Fuzz(func(t *testing.T, worker, topicList string, concurrency, inFlight int32) {
		open := &pulsev1.OpenStream{WorkerId: worker, Topics: strings.Split(topicList, ","), Concurrency: concurrency, InFlight: inFlight}
		before := snapshot(t, b)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stream := newStreamStub(ctx, open)
		done := make(chan error, 1)
		go func() { done <- b.svc.StreamJobs(stream) }()

		select {
		case err := <-done:
			requireRefused(t, err)
			require.Zero(t, stream.sentCount(), "a refused stream was sent something")
			workers, _ := b.registry.Stats()
			require.Zero(t, workers, "a refused stream was registered")
			require.Equal(t, before, snapshot(t, b), "a refused open wrote")
			return
		case <-stream.welcomed:
		case <-time.After(10 * time.Second):
			t.Fatal("StreamJobs neither refused the open nor welcomed the worker")
		}

		// Accepted: the worker's id and topics join the real claim
		// statement, and a job of its first topic reaches it.
		if concurrency > inFlight {
			id := uuid.Must(uuid.NewV7())
			_, err := b.store.Insert(t.Context(), []pulsetype.NewJob{{ID: id, Topic: open.GetTopics()[0], Args: []byte(`{}`), Priority: 5, MaxAttempts: 3}})
			require.NoError(t, err)
			defer deleteJob(t, b, id)
			select {
			case a := <-stream.assigned:
				require.Equal(t, id.String(), a.GetJobId())
			case err := <-done:
				t.Fatalf("stream ended before its job arrived: %v", err)
			case <-time.After(30 * time.Second):
				// A claim that failed (a statement timeout on a starved
				// machine, say) is retried after a backoff of up to 5 s;
				// 30 s is several retries, not a speed.
				t.Fatalf("an accepted worker got no job in 30 s: its claim fails or never runs (%s)", stuckState(b, id))
			}
		}
		// The worker stops as the SDK does, by half-closing: the stream
		// ends once no claim in flight holds a slot of it, so no claim of
		// this run can take the next run's job for a stream that is gone
		// (an abrupt end would leave that job leased to it until its
		// lease lapsed).
		close(stream.halfClose)
		err := <-done
		cancel()
		require.NotContains(t, []codes.Code{codes.Internal, codes.Unknown}, apierr.GRPCStatus(err).Code(), "%v", err)
		workers, _ := b.registry.Stats()
		require.Zero(t, workers)
	})
}
