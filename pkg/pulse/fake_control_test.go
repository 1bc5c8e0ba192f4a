package pulse

import (
	"context"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

// fakeControl is an in-process ControlService that records what it is sent
// and answers every lookup with job.
type fakeControl struct {
	pulsev1.UnimplementedControlServiceServer

	addr string
	job  *pulsev1.Job

	mu       sync.Mutex
	rec      controlRecord
	metadata []metadata.MD
}

// controlRecord is what the fake was sent; tests read a copy taken under
// the lock, since the race detector cannot see ordering through a socket.
type controlRecord struct {
	submitted   []*pulsev1.JobSpec
	batches     [][]*pulsev1.JobSpec
	listRequest *pulsev1.ListJobsRequest
	requested   []string // "get:<id>", "cancel:<id>", "retry:<id>"
}

func (f *fakeControl) recorded() controlRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.rec
	r.submitted = slices.Clone(r.submitted)
	r.batches = slices.Clone(r.batches)
	r.requested = slices.Clone(r.requested)
	return r
}

func newFakeControl(t *testing.T, job *pulsev1.Job) *fakeControl {
	t.Helper()
	f := &fakeControl{job: job}
	f.addr = fakegateway.Serve(t, func(srv *grpc.Server) { pulsev1.RegisterControlServiceServer(srv, f) })
	return f
}

func (f *fakeControl) record(ctx context.Context, what string) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.metadata = append(f.metadata, md)
	if what != "" {
		f.rec.requested = append(f.rec.requested, what)
	}
}

func (f *fakeControl) SubmitJob(ctx context.Context, req *pulsev1.SubmitJobRequest) (*pulsev1.SubmitJobResponse, error) {
	f.record(ctx, "")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec.submitted = append(f.rec.submitted, req.GetJob())
	dup := req.GetJob().GetIdempotencyKey() == "seen-before"
	return &pulsev1.SubmitJobResponse{Result: &pulsev1.SubmitResult{Id: "job-1", Duplicate: dup}}, nil
}

func (f *fakeControl) SubmitJobs(ctx context.Context, req *pulsev1.SubmitJobsRequest) (*pulsev1.SubmitJobsResponse, error) {
	f.record(ctx, "")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec.batches = append(f.rec.batches, req.GetJobs())
	resp := &pulsev1.SubmitJobsResponse{}
	for i := range req.GetJobs() {
		resp.Results = append(resp.Results, &pulsev1.SubmitResult{Id: "job-" + string(rune('a'+i))})
	}
	return resp, nil
}

func (f *fakeControl) GetJob(ctx context.Context, req *pulsev1.GetJobRequest) (*pulsev1.GetJobResponse, error) {
	f.record(ctx, "get:"+req.GetId())
	return &pulsev1.GetJobResponse{Job: f.job}, nil
}

func (f *fakeControl) ListJobs(ctx context.Context, req *pulsev1.ListJobsRequest) (*pulsev1.ListJobsResponse, error) {
	f.record(ctx, "")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec.listRequest = req
	return &pulsev1.ListJobsResponse{Jobs: []*pulsev1.Job{f.job}, NextPageToken: "next"}, nil
}

func (f *fakeControl) CancelJob(ctx context.Context, req *pulsev1.CancelJobRequest) (*pulsev1.CancelJobResponse, error) {
	f.record(ctx, "cancel:"+req.GetId())
	return &pulsev1.CancelJobResponse{Job: f.job}, nil
}

func (f *fakeControl) RetryJob(ctx context.Context, req *pulsev1.RetryJobRequest) (*pulsev1.RetryJobResponse, error) {
	f.record(ctx, "retry:"+req.GetId())
	return &pulsev1.RetryJobResponse{Job: f.job}, nil
}

func (f *fakeControl) lastMetadata() metadata.MD {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.metadata[len(f.metadata)-1]
}
