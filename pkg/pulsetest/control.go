package pulsetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsequeue/pulse/pkg/pulse"
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// Enqueued is one job a [Control] accepted, as the server would store
// it: the server's defaults filled in for what the producer left out.
type Enqueued struct {
	ID             string
	Topic          string
	Args           json.RawMessage
	Priority       int
	MaxAttempts    int
	RunAt          time.Time // zero: as soon as possible
	IdempotencyKey string
	Timeout        time.Duration
	UniqueFor      time.Duration
	// ReplaceKey and ReplaceMode: pulse.ReplacePending's (every recorded
	// job is pending and never started, so a submit of its key replaces it).
	ReplaceKey  string
	ReplaceMode pulsev1.ReplaceMode
	SubmittedAt time.Time
}

// Control is an in-process control-api on a loopback port that accepts
// and records every job an application's real [pulse.Client] enqueues,
// so a test asserts what was enqueued without a fleet. It checks what the
// server checks of a job's own fields (topic, priority, attempts, key,
// durations; args a JSON object) and refuses a bad job with
// InvalidArgument naming the field, as control-api does; it applies
// idempotency keys (a key seen before answers the first job as a
// duplicate), unique periods (same topic and args within the period) and
// replace keys (a recorded job of the topic and key takes the new args and
// run time as the mode says, and answers as replaced).
// GetJob answers an enqueued job as PENDING; List, Cancel and Retry are
// not implemented.
type Control struct {
	pulsev1.UnimplementedControlServiceServer

	addr string

	mu   sync.Mutex
	jobs []Enqueued
	seq  int
}

// NewControl starts a control-api on a loopback port; it stops when the
// test ends.
func NewControl(t testing.TB) *Control {
	t.Helper()
	c := &Control{}
	c.addr = fakegateway.Serve(t, func(srv *grpc.Server) { pulsev1.RegisterControlServiceServer(srv, c) })
	return c
}

// Addr is the control-api's host:port, a target for pulse.NewClient.
func (c *Control) Addr() string { return c.addr }

// Client is a real pulse.Client connected to c with opts; it is closed
// when the test ends.
func (c *Control) Client(t testing.TB, opts ...pulse.ClientOption) *pulse.Client {
	t.Helper()
	client, err := pulse.NewClient(c.addr, opts...)
	if err != nil {
		t.Fatalf("pulsetest: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// Enqueued is every job accepted so far, in order (duplicates were not
// accepted: they answered an earlier job).
func (c *Control) Enqueued() []Enqueued {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Enqueued(nil), c.jobs...)
}

// RequireEnqueued fails the test unless a job of topic was enqueued whose
// args match, and returns the first such job. args nil matches any args;
// a func(json.RawMessage) bool decides itself; anything else matches when
// it encodes (as pulse.Client.Enqueue encodes args) to the same JSON
// value as the job's args: key order and spacing do not matter, and a
// struct matches the JSON it was enqueued from.
func (c *Control) RequireEnqueued(t testing.TB, topic string, args any) Enqueued {
	t.Helper()
	match, err := argsMatcher(args)
	if err != nil {
		t.Fatalf("pulsetest: RequireEnqueued(%q): %v", topic, err)
	}
	jobs := c.Enqueued()
	for _, j := range jobs {
		if j.Topic == topic && match(j.Args) {
			return j
		}
	}
	t.Fatalf("pulsetest: no job of topic %q with matching args was enqueued; enqueued: %s", topic, describe(jobs))
	return Enqueued{}
}

// RequireNotEnqueued fails the test if any job of topic was enqueued.
func (c *Control) RequireNotEnqueued(t testing.TB, topic string) {
	t.Helper()
	for _, j := range c.Enqueued() {
		if j.Topic == topic {
			t.Fatalf("pulsetest: want no job of topic %q, got %s (args %s)", topic, j.ID, j.Args)
		}
	}
}

// Reset forgets every job, keys and unique periods included.
func (c *Control) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobs = nil
}

// SubmitJob implements ControlService.
func (c *Control) SubmitJob(_ context.Context, req *pulsev1.SubmitJobRequest) (*pulsev1.SubmitJobResponse, error) {
	j, err := checkSpec("", req.GetJob())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return &pulsev1.SubmitJobResponse{Result: c.accept(j)}, nil
}

// SubmitJobs implements ControlService: every job is checked before any
// is accepted, as control-api does.
func (c *Control) SubmitJobs(_ context.Context, req *pulsev1.SubmitJobsRequest) (*pulsev1.SubmitJobsResponse, error) {
	jobs := make([]Enqueued, len(req.GetJobs()))
	for i, spec := range req.GetJobs() {
		j, err := checkSpec(fmt.Sprintf("jobs[%d]", i), spec)
		if err != nil {
			return nil, err
		}
		jobs[i] = j
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &pulsev1.SubmitJobsResponse{}
	for _, j := range jobs {
		resp.Results = append(resp.Results, c.accept(j))
	}
	return resp, nil
}

// GetJob implements ControlService: an enqueued job is PENDING.
func (c *Control) GetJob(_ context.Context, req *pulsev1.GetJobRequest) (*pulsev1.GetJobResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range c.jobs {
		if j.ID == req.GetId() {
			return &pulsev1.GetJobResponse{Job: &pulsev1.Job{
				Id: j.ID, Topic: j.Topic, Args: j.Args, Priority: int32(j.Priority),
				Status: pulsev1.JobStatus_JOB_STATUS_PENDING, MaxAttempts: int32(j.MaxAttempts),
				SubmittedAt: timestamppb.New(j.SubmittedAt), IdempotencyKey: j.IdempotencyKey,
			}}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "job %q not found", req.GetId())
}

// accept stores j unless a live key or unique period answers it.
func (c *Control) accept(j Enqueued) *pulsev1.SubmitResult {
	for i, old := range c.jobs {
		if j.ReplaceKey != "" && old.ReplaceKey == j.ReplaceKey && old.Topic == j.Topic {
			if j.ReplaceMode == pulsev1.ReplaceMode_REPLACE_MODE_KEEP_FIRST {
				return &pulsev1.SubmitResult{Id: old.ID, Duplicate: true}
			}
			c.jobs[i].Args = j.Args
			if j.ReplaceMode != pulsev1.ReplaceMode_REPLACE_MODE_KEEP_EARLIER_RUN_AT ||
				(!old.RunAt.IsZero() && (j.RunAt.IsZero() || j.RunAt.Before(old.RunAt))) {
				c.jobs[i].RunAt = j.RunAt
			}
			return &pulsev1.SubmitResult{Id: old.ID, Duplicate: true, Replaced: true}
		}
		if j.IdempotencyKey != "" && old.IdempotencyKey == j.IdempotencyKey {
			return &pulsev1.SubmitResult{Id: old.ID, Duplicate: true}
		}
		if j.UniqueFor > 0 && old.UniqueFor > 0 && old.Topic == j.Topic && jsonEqual(old.Args, j.Args) &&
			j.SubmittedAt.Before(old.SubmittedAt.Add(old.UniqueFor)) {
			return &pulsev1.SubmitResult{Id: old.ID, Duplicate: true}
		}
	}
	c.seq++
	j.ID = fmt.Sprintf("pulsetest-job-%d", c.seq)
	c.jobs = append(c.jobs, j)
	return &pulsev1.SubmitResult{Id: j.ID}
}

// checkSpec holds a job to pulsetype's limits, as jobspec does, and fills
// in the server's defaults.
func checkSpec(prefix string, spec *pulsev1.JobSpec) (Enqueued, error) {
	field := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	invalid := func(name, format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "%s: %s", field(name), fmt.Sprintf(format, args...))
	}
	if spec == nil {
		return Enqueued{}, status.Errorf(codes.InvalidArgument, "%s: is required", prefix)
	}
	j := Enqueued{
		Topic: spec.GetTopic(), Args: bytes.TrimSpace(spec.GetArgs()), Priority: pulsetype.DefaultPriority,
		MaxAttempts: pulsetype.DefaultMaxAttempts, IdempotencyKey: spec.GetIdempotencyKey(), SubmittedAt: time.Now(),
	}
	if !pulsetype.ValidTopic(j.Topic) {
		return Enqueued{}, invalid("topic", "%q is not a valid topic (%s)", j.Topic, pulsetype.TopicPattern)
	}
	if len(j.Args) == 0 {
		j.Args = json.RawMessage(`{}`)
	}
	if len(j.Args) > pulsetype.DefaultMaxArgsBytes {
		return Enqueued{}, invalid("args", "is %d bytes; the limit is %d bytes", len(j.Args), pulsetype.DefaultMaxArgsBytes)
	}
	if !json.Valid(j.Args) || j.Args[0] != '{' {
		return Enqueued{}, invalid("args", "must be a JSON object")
	}
	if spec.GetHasPriority() || spec.GetPriority() != 0 {
		if p := spec.GetPriority(); p < pulsetype.MinPriority || p > pulsetype.MaxPriority {
			return Enqueued{}, invalid("priority", "is %d; it must be between %d and %d", p, pulsetype.MinPriority, pulsetype.MaxPriority)
		}
		j.Priority = int(spec.GetPriority())
	}
	if n := spec.GetMaxAttempts(); n != 0 {
		if n < pulsetype.MinMaxAttempts || n > pulsetype.MaxMaxAttempts {
			return Enqueued{}, invalid("max_attempts", "is %d; it must be between %d and %d", n, pulsetype.MinMaxAttempts, pulsetype.MaxMaxAttempts)
		}
		j.MaxAttempts = int(n)
	}
	if len(j.IdempotencyKey) > pulsetype.MaxIdempotencyKeyBytes {
		return Enqueued{}, invalid("idempotency_key", "is %d bytes; the limit is %d", len(j.IdempotencyKey), pulsetype.MaxIdempotencyKeyBytes)
	}
	if ts := spec.GetRunAt(); ts != nil {
		j.RunAt = ts.AsTime()
	}
	if d := spec.GetTimeout(); d != nil {
		if j.Timeout = d.AsDuration(); j.Timeout < pulsetype.MinTimeout || j.Timeout > pulsetype.MaxTimeout {
			return Enqueued{}, invalid("timeout", "is %s; it must be between %s and %s", j.Timeout, pulsetype.MinTimeout, pulsetype.MaxTimeout)
		}
	}
	if d := spec.GetUniqueFor(); d != nil {
		if j.UniqueFor = d.AsDuration(); j.UniqueFor < pulsetype.MinUniqueFor || j.UniqueFor > pulsetype.MaxUniqueFor {
			return Enqueued{}, invalid("unique_for", "is %s; it must be between %s and %s", j.UniqueFor, pulsetype.MinUniqueFor, pulsetype.MaxUniqueFor)
		}
	}
	if j.ReplaceKey, j.ReplaceMode = spec.GetReplaceKey(), spec.GetReplaceMode(); j.ReplaceKey != "" {
		if len(j.ReplaceKey) > pulsetype.MaxReplaceKeyBytes {
			return Enqueued{}, invalid("replace_key", "is %d bytes; the limit is %d", len(j.ReplaceKey), pulsetype.MaxReplaceKeyBytes)
		}
		if j.IdempotencyKey != "" || j.UniqueFor > 0 {
			return Enqueued{}, invalid("replace_key", "cannot be combined with idempotency_key or unique_for")
		}
	}
	return j, nil
}

// argsMatcher turns RequireEnqueued's args into a test of a job's args.
func argsMatcher(args any) (func(json.RawMessage) bool, error) {
	switch a := args.(type) {
	case nil:
		return func(json.RawMessage) bool { return true }, nil
	case func(json.RawMessage) bool:
		return a, nil
	}
	spec, err := (&pulse.JobRequest{Topic: DefaultTopic, Args: args}).Spec()
	if err != nil {
		return nil, err
	}
	want := spec.GetArgs()
	return func(got json.RawMessage) bool { return jsonEqual(got, want) }, nil
}

// jsonEqual compares two documents as JSON values.
// Numbers compare as written (UseNumber), so large integers are not
// rounded into equality.
func jsonEqual(a, b []byte) bool {
	va, errA := decodeJSON(a)
	vb, errB := decodeJSON(b)
	if errA != nil || errB != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func describe(jobs []Enqueued) string {
	if len(jobs) == 0 {
		return "none"
	}
	parts := make([]string, len(jobs))
	for i, j := range jobs {
		parts[i] = fmt.Sprintf("%s %s", j.Topic, j.Args)
	}
	return strings.Join(parts, "; ")
}
