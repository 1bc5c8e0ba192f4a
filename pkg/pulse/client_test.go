package pulse

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

func TestClient(t *testing.T) {
	t.Parallel()

	submittedAt := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	storedJob := &pulsev1.Job{
		Id: "job-1", Topic: "email.send", Args: []byte(`{"to":"a@b.c"}`), Priority: 4,
		Status: pulsev1.JobStatus_JOB_STATUS_DEAD_LETTERED, Attempts: 2, MaxAttempts: 2,
		Errors: []*pulsev1.AttemptError{
			{Attempt: 1, Error: "smtp down", Worker: "w1", At: timestamppb.New(submittedAt.Add(time.Second))},
			{Attempt: 2, Error: "smtp down", Worker: "w2", At: timestamppb.New(submittedAt.Add(2 * time.Second))},
		},
		SubmittedAt: timestamppb.New(submittedAt), FinishedAt: timestamppb.New(submittedAt.Add(2 * time.Second)),
		ScheduleId: "sched-1", IdempotencyKey: "key-1",
	}

	type testBundle struct {
		control *fakeControl
		client  *Client
	}
	setup := func(t *testing.T, opts ...ClientOption) *testBundle {
		t.Helper()
		control := newFakeControl(t, storedJob)
		client, err := NewClient(control.addr, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, client.Close()) })
		return &testBundle{control: control, client: client}
	}

	t.Run("EnqueueSendsTheArgsBytesAndOptions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runAt := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		args := json.RawMessage(`{"z":1,"big":12345678901234567890123}`)

		sub, err := b.client.Enqueue(t.Context(), "email.send", args,
			Priority(7), MaxAttempts(3), RunAt(runAt), IdempotencyKey("k-1"))
		require.NoError(t, err)
		require.Equal(t, Submitted{ID: "job-1"}, sub)

		require.Len(t, b.control.recorded().submitted, 1)
		spec := b.control.recorded().submitted[0]
		require.Equal(t, "email.send", spec.GetTopic())
		require.Equal(t, []byte(args), spec.GetArgs())
		require.Equal(t, int32(7), spec.GetPriority())
		require.True(t, spec.GetHasPriority())
		require.Equal(t, int32(3), spec.GetMaxAttempts())
		require.Equal(t, runAt, spec.GetRunAt().AsTime())
		require.Equal(t, "k-1", spec.GetIdempotencyKey())
	})

	t.Run("EnqueueLeavesUnsetOptionsToTheServer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.client.Enqueue(t.Context(), "t", nil)
		require.NoError(t, err)
		spec := b.control.recorded().submitted[0]
		require.False(t, spec.GetHasPriority())
		require.Zero(t, spec.GetMaxAttempts())
		require.Nil(t, spec.GetRunAt())
	})

	t.Run("EnqueueEncodesEachKindOfArgs", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name string
			args any
			want string
		}{
			{"nil", nil, `{}`},
			{"bytes", []byte(`{"a" : 1}`), `{"a" : 1}`},
			{"raw message", json.RawMessage(`{"b":2}`), `{"b":2}`},
			{"empty bytes", []byte{}, `{}`},
			{"struct", struct {
				N int `json:"n"`
			}{N: 3}, `{"n":3}`},
			{"map", map[string]string{"k": "v"}, `{"k":"v"}`},
		}
		b := setup(t)
		for i, c := range cases {
			_, err := b.client.Enqueue(t.Context(), "t", c.args)
			require.NoError(t, err, c.name)
			require.Equal(t, c.want, string(b.control.recorded().submitted[i].GetArgs()), c.name)
		}
	})

	t.Run("DelaySetsRunAtRelativeToNow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := time.Now()
		_, err := b.client.Enqueue(t.Context(), "t", nil, Delay(time.Hour))
		require.NoError(t, err)
		runAt := b.control.recorded().submitted[0].GetRunAt().AsTime()
		require.False(t, runAt.Before(before.Add(time.Hour)))
	})

	t.Run("DuplicateSubmitIsReported", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sub, err := b.client.Enqueue(t.Context(), "t", nil, IdempotencyKey("seen-before"))
		require.NoError(t, err)
		require.True(t, sub.Duplicate)
	})

	t.Run("InvalidOptionsFailBeforeAnyRPC", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, opt := range []EnqueueOption{Priority(11), Priority(-1), MaxAttempts(0), MaxAttempts(101)} {
			_, err := b.client.Enqueue(t.Context(), "t", nil, opt)
			require.Error(t, err)
		}
		_, err := b.client.Enqueue(t.Context(), "", nil)
		require.ErrorContains(t, err, "topic")
		_, err = b.client.Enqueue(t.Context(), "t", func() {})
		require.ErrorContains(t, err, "encode args")
		require.Empty(t, b.control.recorded().submitted)
	})

	t.Run("EnqueueManyIsOneRPCInRequestOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		subs, err := b.client.EnqueueMany(t.Context(), []JobRequest{
			{Topic: "a", Args: []byte(`{"n":1}`)},
			{Topic: "b", Args: map[string]int{"n": 2}, Options: []EnqueueOption{Priority(9)}},
			{Topic: "c"},
		})
		require.NoError(t, err)
		require.Equal(t, []Submitted{{ID: "job-a"}, {ID: "job-b"}, {ID: "job-c"}}, subs)
		require.Empty(t, b.control.recorded().submitted)
		require.Len(t, b.control.recorded().batches, 1)
		batch := b.control.recorded().batches[0]
		require.Len(t, batch, 3)
		require.Equal(t, `{"n":1}`, string(batch[0].GetArgs()))
		require.Equal(t, "b", batch[1].GetTopic())
		require.Equal(t, int32(9), batch[1].GetPriority())
		require.True(t, batch[1].GetHasPriority())
		require.Equal(t, `{}`, string(batch[2].GetArgs()))
	})

	t.Run("GetCancelAndRetryReturnPlainJobInfo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		want := &JobInfo{
			ID: "job-1", Topic: "email.send", Args: json.RawMessage(`{"to":"a@b.c"}`), Priority: 4,
			Status: "DEAD_LETTERED", Attempts: 2, MaxAttempts: 2,
			Errors: []AttemptError{
				{Attempt: 1, Error: "smtp down", Worker: "w1", At: submittedAt.Add(time.Second)},
				{Attempt: 2, Error: "smtp down", Worker: "w2", At: submittedAt.Add(2 * time.Second)},
			},
			SubmittedAt: submittedAt, FinishedAt: submittedAt.Add(2 * time.Second),
			ScheduleID: "sched-1", IdempotencyKey: "key-1", Progress: -1,
		}
		ctx := t.Context()
		got, err := b.client.Get(ctx, "job-1")
		require.NoError(t, err)
		require.Equal(t, want, got)
		got, err = b.client.Cancel(ctx, "job-2")
		require.NoError(t, err)
		require.Equal(t, want, got)
		got, err = b.client.Retry(ctx, "job-3")
		require.NoError(t, err)
		require.Equal(t, want, got)
		require.Equal(t, []string{"get:job-1", "cancel:job-2", "retry:job-3"}, b.control.recorded().requested)
	})

	t.Run("ListPassesFiltersAndReturnsTheNextToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs, next, err := b.client.List(t.Context(), ListOptions{Topic: "email.send", Status: "retrying", Limit: 20, PageToken: "p1"})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, "job-1", jobs[0].ID)
		require.Equal(t, "next", next)
		req := b.control.recorded().listRequest
		require.Equal(t, "email.send", req.GetTopic())
		require.Equal(t, pulsev1.JobStatus_JOB_STATUS_RETRYING, req.GetStatus())
		require.Equal(t, int32(20), req.GetLimit())
		require.Equal(t, "p1", req.GetPageToken())

		_, _, err = b.client.List(t.Context(), ListOptions{Status: "BOGUS"})
		require.ErrorContains(t, err, "unknown job status")
	})

	t.Run("WithUserPassSendsBasicAuth", func(t *testing.T) {
		t.Parallel()
		b := setup(t, WithUserPass("producer", "s3cret"))
		_, err := b.client.Enqueue(t.Context(), "t", nil)
		require.NoError(t, err)
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte("producer:s3cret"))
		require.Equal(t, []string{want}, b.control.lastMetadata().Get("authorization"))
	})

	t.Run("TraceContextTravelsInMetadata", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
			SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
			TraceFlags: trace.FlagsSampled,
		})
		ctx := trace.ContextWithSpanContext(t.Context(), sc)
		_, err := b.client.Enqueue(ctx, "t", nil)
		require.NoError(t, err)
		require.Equal(t, []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			b.control.lastMetadata().Get("traceparent"))
	})
}
