package pulse

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetest/fakegateway"
)

type emailArgs struct {
	To    string `json:"to"`
	Count int    `json:"count"`
}

func TestHandlerFor(t *testing.T) {
	t.Parallel()
	var got []emailArgs
	h := HandlerFor(func(_ context.Context, job *Job, args emailArgs) error {
		got = append(got, args)
		if args.To == "fail" {
			return errors.New("smtp down")
		}
		return nil
	})
	job := func(args string) *Job { return &Job{ID: "job-1", Topic: "email.send", Args: json.RawMessage(args)} }

	require.NoError(t, h(t.Context(), job(`{"to":"a@b.c","count":2,"added_later":true}`)))
	require.Equal(t, []emailArgs{{To: "a@b.c", Count: 2}}, got, "unknown fields are ignored")

	err := h(t.Context(), job(`{"to":"fail"}`))
	require.EqualError(t, err, "smtp down")
	require.False(t, IsPermanent(err), "the handler's own error keeps its kind")

	for _, bad := range []string{`{"count":"two"}`, `{"to":1}`, `[1]`, `not json`, ``, `{"to":"a"`} {
		got = nil
		err := h(t.Context(), job(bad))
		require.True(t, IsPermanent(err), "args %q: a decode failure is permanent", bad)
		var ae *ArgsError
		require.ErrorAs(t, err, &ae, "args %q", bad)
		require.Equal(t, "pulse.emailArgs", ae.Type)
		require.Equal(t, "job-1", ae.JobID)
		require.ErrorContains(t, err, "args of job job-1 (topic email.send) do not decode into pulse.emailArgs")
		require.Nil(t, got, "args %q: the function is not called", bad)
	}

	require.PanicsWithValue(t, "pulse: HandlerFor[pulse.emailArgs] with a nil function", func() {
		HandlerFor[emailArgs](nil)
	})
}

func TestTopic(t *testing.T) {
	t.Parallel()
	sendEmail := NewTopic[emailArgs]("email.send")
	require.Equal(t, "email.send", sendEmail.Name())
	require.PanicsWithValue(t, `pulse: NewTopic[pulse.emailArgs]("bad topic"): pulse: topic "bad topic" has characters outside [A-Za-z0-9._:-] or does not start with a letter or digit`,
		func() { NewTopic[emailArgs]("bad topic") })

	t.Run("EnqueueSendsTheTopicAndTheEncodedArgs", func(t *testing.T) {
		t.Parallel()
		control := newFakeControl(t, &pulsev1.Job{Id: "job-1"})
		client, err := NewClient(control.addr)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, client.Close()) })

		_, err = sendEmail.Enqueue(t.Context(), client, emailArgs{To: "a@b.c", Count: 1}, Priority(7))
		require.NoError(t, err)
		_, err = client.EnqueueMany(t.Context(), []JobRequest{sendEmail.Request(emailArgs{To: "x"}, MaxAttempts(2))})
		require.NoError(t, err)

		rec := control.recorded()
		require.Len(t, rec.submitted, 1)
		require.Equal(t, "email.send", rec.submitted[0].GetTopic())
		require.JSONEq(t, `{"to":"a@b.c","count":1}`, string(rec.submitted[0].GetArgs()))
		require.Equal(t, int32(7), rec.submitted[0].GetPriority())
		require.Len(t, rec.batches, 1)
		require.JSONEq(t, `{"to":"x","count":0}`, string(rec.batches[0][0].GetArgs()))
		require.Equal(t, int32(2), rec.batches[0][0].GetMaxAttempts())
	})

	t.Run("ArgsThatDoNotDecodeDeadLetterTheJob", func(t *testing.T) {
		t.Parallel()
		gw := fakegateway.New(t, "gw-1", fakegateway.FastWelcome())
		called := make(chan emailArgs, 2)
		startWorker(t, []string{gw.Addr()}, map[string]Handler{
			sendEmail.Name(): sendEmail.Handler(func(_ context.Context, _ *Job, args emailArgs) error {
				called <- args
				return nil
			}),
		})
		fs := gw.NextStream(t)
		require.Equal(t, []string{"email.send"}, fs.Open.GetTopics())

		good := fakegateway.Assignment("job-1", "email.send")
		good.Args = []byte(`{"to":"a@b.c"}`)
		fs.Assign(good)
		res := gw.NextResult(t)
		require.Equal(t, pulsev1.Outcome_OUTCOME_COMPLETE, res.GetOutcome())
		require.Equal(t, emailArgs{To: "a@b.c"}, <-called)

		bad := fakegateway.Assignment("job-2", "email.send")
		bad.Args = []byte(`{"to":["not","a","string"]}`)
		fs.Assign(bad)
		res = gw.NextResult(t)
		require.Equal(t, pulsev1.Outcome_OUTCOME_FAIL_PERMANENT, res.GetOutcome())
		require.Contains(t, res.GetError(), "args of job job-2 (topic email.send) do not decode into pulse.emailArgs")
		require.Empty(t, called, "the handler never ran on args it cannot take")
	})
}
