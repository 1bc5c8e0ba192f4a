package api_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit"
	"github.com/pulsequeue/pulse/services/control-api/internal/submit/submittest"
)

// poisonedSpecs are submits with one value Postgres cannot store, each
// with the field its refusal must name. Over the wire, proto3 refuses
// invalid UTF-8 in a string field before any handler runs, so such
// strings are handed to the service in-process (direct).
var poisonedSpecs = []struct {
	name   string
	field  string
	direct bool
	apply  func(*pulsev1.JobSpec)
}{
	{"InvalidUTF8InArgs", "job.args", false, func(s *pulsev1.JobSpec) { s.Args = []byte("{\"to\":\"\xff\"}") }},
	{"NULKeyInArgs", "job.args", false, func(s *pulsev1.JobSpec) { s.Args = []byte(`{"\u0000":1}`) }},
	{"NULValueInArgs", "job.args", false, func(s *pulsev1.JobSpec) { s.Args = []byte(`{"to":"a\u0000b"}`) }},
	{"NumberJsonbCannotHold", "job.args", false, func(s *pulsev1.JobSpec) { s.Args = []byte(`{"n":1e1000000}`) }},
	{"LoneSurrogateInArgs", "job.args", false, func(s *pulsev1.JobSpec) { s.Args = []byte(`{"to":"\udc00"}`) }},
	{"HugeTimestamp", "job.run_at", false, func(s *pulsev1.JobSpec) {
		s.RunAt = timestamppb.New(time.Date(9500, 1, 1, 0, 0, 0, 0, time.UTC))
	}},
	{"TimestampOutsideProto", "job.run_at", false, func(s *pulsev1.JobSpec) { s.RunAt = &timestamppb.Timestamp{Seconds: 1 << 50} }},
	{"NULInIdempotencyKey", "job.idempotency_key", false, func(s *pulsev1.JobSpec) { s.IdempotencyKey = "order\x0042" }},
	{"InvalidUTF8InIdempotencyKey", "job.idempotency_key", true, func(s *pulsev1.JobSpec) { s.IdempotencyKey = "order\xc3" }},
	{"InvalidUTF8InTopic", "job.topic", true, func(s *pulsev1.JobSpec) { s.Topic = "email\xff" }},
}

// lineUp submits one job and waits until the coalescer's only flusher
// holds it at the shut gate: every submit accepted after that queues up
// for one shared INSERT.
func lineUp(t *testing.T, b *testBundle) <-chan error {
	t.Helper()
	first := make(chan error, 1)
	go func() {
		_, err := b.client.SubmitJob(t.Context(), &pulsev1.SubmitJobRequest{Job: spec("first")})
		first <- err
	}()
	submittest.Wait(t, b.Coalescer, "the first submit taken by the flusher", func(s submit.Stats) bool { return s.Submits == 1 && s.Queued == 0 })
	return first
}

// TestOnePoisonedSubmitNeverHarmsItsBatch: 50 concurrent SubmitJob calls,
// one of them carrying a value Postgres cannot store. The poisoned one is
// refused with InvalidArgument naming its field before it joins the batch;
// the 49 others share one INSERT and all succeed.
func TestOnePoisonedSubmitNeverHarmsItsBatch(t *testing.T) {
	t.Parallel()
	for _, p := range poisonedSpecs {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			gate := submittest.NewGate()
			b := setupWith(t, apitest.Options{Flushers: 1, Inserter: gate.Wrap})
			first := lineUp(t, b)

			const n, culprit = 50, 17
			errs := make([]error, n)
			ids := make([]string, n)
			submittest.Burst(t, b.Coalescer, gate, n, n-1, func(i int) {
				s := spec("email.send")
				var res *pulsev1.SubmitJobResponse
				var err error
				if i == culprit {
					p.apply(s)
					if p.direct {
						res, err = b.Service.SubmitJob(t.Context(), &pulsev1.SubmitJobRequest{Job: s})
					} else {
						res, err = b.client.SubmitJob(t.Context(), &pulsev1.SubmitJobRequest{Job: s})
					}
				} else {
					res, err = b.client.SubmitJob(t.Context(), &pulsev1.SubmitJobRequest{Job: s})
				}
				errs[i] = err
				ids[i] = res.GetResult().GetId()
			})
			require.NoError(t, <-first)

			if p.direct {
				require.ErrorIs(t, errs[culprit], apierr.ErrInvalidArgument)
				require.Equal(t, p.field, apierr.FieldOf(errs[culprit]), "%v", errs[culprit])
			} else {
				requireInvalid(t, errs[culprit], p.field)
			}
			seen := map[string]bool{}
			for i := range n {
				if i != culprit {
					require.NoError(t, errs[i], "submit %d", i)
					seen[ids[i]] = true
				}
			}
			require.Len(t, seen, n-1)
			require.Equal(t, n, b.CountJobs(t))
			require.EqualValues(t, 2, b.Coalescer.Stats().Statements, "the first job, then the 49 in one INSERT")
		})
	}
}

// TestADataErrorPastValidationFailsOnlyItsSubmitter forces what validation
// cannot know: a CHECK constraint refuses args holding "poison". The
// poisoned submit joins the batch of 50, Postgres refuses the batch, the
// store splits it, and only the poisoned submit fails, naming its field.
func TestADataErrorPastValidationFailsOnlyItsSubmitter(t *testing.T) {
	t.Parallel()
	gate := submittest.NewGate()
	b := setupWith(t, apitest.Options{Flushers: 1, Inserter: gate.Wrap})
	b.PoisonArgs(t)
	first := lineUp(t, b)

	const n, culprit = 50, 33
	errs := make([]error, n)
	submittest.Burst(t, b.Coalescer, gate, n, n, func(i int) {
		s := spec("email.send")
		if i == culprit {
			s.Args = []byte(`{"poison":true}`)
		}
		_, errs[i] = b.client.SubmitJob(t.Context(), &pulsev1.SubmitJobRequest{Job: s})
	})
	require.NoError(t, <-first)
	requireInvalid(t, errs[culprit], "job.args")
	for i := range n {
		if i != culprit {
			require.NoError(t, errs[i], "submit %d", i)
		}
	}
	require.Equal(t, n, b.CountJobs(t), "the first job and the 49 good ones")
	require.EqualValues(t, 2, b.Coalescer.Stats().Statements, "the poisoned submit was in the batch of 50")

	// SubmitJobs is all or nothing: the same refusal names the spec and
	// writes nothing.
	specs := []*pulsev1.JobSpec{spec("a"), spec("b"), spec("c"), spec("d")}
	specs[2].Args = []byte(`{"poison":1}`)
	_, err := b.client.SubmitJobs(t.Context(), &pulsev1.SubmitJobsRequest{Jobs: specs})
	requireInvalid(t, err, "jobs[2].args")
	require.Equal(t, n, b.CountJobs(t))
}

// TestUnstorableValuesAreRefusedNamingTheField covers every other text,
// time and token the service sends to SQL.
func TestUnstorableValuesAreRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	sched := api.NewSchedules(b.Store, nil, nil)
	dispatch := api.NewDispatchControl(b.Store, api.DispatchOptions{})
	existing, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: &pulsev1.ScheduleDefinition{
		Name: "nightly", Topic: "reports", Kind: "cron", Expression: "0 3 * * *",
	}})
	require.NoError(t, err)
	before := b.CountRows(t)

	def := func(f func(*pulsev1.ScheduleDefinition)) *pulsev1.ScheduleDefinition {
		d := &pulsev1.ScheduleDefinition{Name: "hourly", Topic: "reports", Kind: "cron", Expression: "@hourly"}
		f(d)
		return d
	}
	far := timestamppb.New(time.Date(9500, 1, 1, 0, 0, 0, 0, time.UTC))
	cases := []struct {
		name  string
		call  func() error
		field string
	}{
		{"ListJobsTopicNUL", func() error {
			_, err := b.Service.ListJobs(ctx, &pulsev1.ListJobsRequest{Topic: "a\x00"})
			return err
		}, "topic"},
		{"ListJobsTokenWithALineBreak", func() error {
			_, err := b.Service.ListJobs(ctx, &pulsev1.ListJobsRequest{PageToken: "AAAAAAAAAAAA\nAAAAAAAAAA"})
			return err
		}, "page_token"},
		{"ListJobsTokenWithStrayBits", func() error {
			_, err := b.Service.ListJobs(ctx, &pulsev1.ListJobsRequest{PageToken: "AAAAAAAAAAAAAAAAAAAAAB"})
			return err
		}, "page_token"},
		{"CancelIDInvalidUTF8", func() error {
			_, err := b.Service.CancelJob(ctx, &pulsev1.CancelJobRequest{Id: "\xff"})
			return err
		}, "id"},
		{"RetryIDNUL", func() error {
			_, err := b.Service.RetryJob(ctx, &pulsev1.RetryJobRequest{Id: "\x00"})
			return err
		}, "id"},
		{"PauseReasonNUL", func() error {
			_, err := dispatch.PauseDispatch(ctx, &pulsev1.PauseDispatchRequest{Reason: "deploy\x00"})
			return err
		}, "reason"},
		{"PauseReasonInvalidUTF8", func() error {
			_, err := dispatch.PauseDispatch(ctx, &pulsev1.PauseDispatchRequest{Reason: "deploy\xc3"})
			return err
		}, "reason"},
		{"PauseTopicNUL", func() error {
			_, err := dispatch.PauseDispatch(ctx, &pulsev1.PauseDispatchRequest{Reason: "r", Topic: "mail\x00"})
			return err
		}, "topic"},
		{"PauseUntilFarAway", func() error {
			_, err := dispatch.PauseDispatch(ctx, &pulsev1.PauseDispatchRequest{Reason: "r", Until: far})
			return err
		}, "until"},
		{"PauseForNegative", func() error {
			_, err := dispatch.PauseDispatch(ctx, &pulsev1.PauseDispatchRequest{Reason: "r", PauseFor: durationpb.New(-time.Hour)})
			return err
		}, "pause_for"},
		{"ResumeTopicInvalidUTF8", func() error {
			_, err := dispatch.ResumeDispatch(ctx, &pulsev1.ResumeDispatchRequest{Topic: "\xff"})
			return err
		}, "topic"},
		{"EventsTokenNotCanonical", func() error {
			_, err := dispatch.ListDispatchEvents(ctx, &pulsev1.ListDispatchEventsRequest{PageToken: "MDEy"}) // "012"
			return err
		}, "page_token"},
		{"ScheduleNameNUL", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Name = "a\x00" })})
			return err
		}, "name"},
		{"ScheduleTopicInvalidUTF8", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Topic = "t\xff" })})
			return err
		}, "topic"},
		{"ScheduleArgsNUL", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Args = []byte(`{"a":"\u0000"}`) })})
			return err
		}, "args"},
		{"ScheduleArgsHugeNumber", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Args = []byte(`{"a":-1e1000000}`) })})
			return err
		}, "args"},
		{"ScheduleExpressionNUL", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Kind, d.Expression = "every", "1h\x00" })})
			return err
		}, "expression"},
		{"ScheduleTimeZoneNUL", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Kind, d.Expression, d.TimeZone = "every", "1h", "UTC\x00" })})
			return err
		}, "time_zone"},
		{"ScheduleTimeZoneInvalidUTF8", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.TimeZone = "Europe/\xff" })})
			return err
		}, "time_zone"},
		{"CronThatNeverFires", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Expression = "0 0 30 2 *" })})
			return err
		}, "expression"},
		{"UpdateToACronThatNeverFires", func() error {
			_, err := sched.UpdateSchedule(ctx, &pulsev1.UpdateScheduleRequest{Id: existing.GetId(), Definition: def(func(d *pulsev1.ScheduleDefinition) {
				d.Name, d.Expression = "nightly", "0 0 31 4 *"
			})})
			return err
		}, "expression"},
		{"AtFarAway", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Kind, d.Expression = "at", "9500-01-01T00:00:00Z" })})
			return err
		}, "expression"},
		{"AtBefore1970", func() error {
			_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def(func(d *pulsev1.ScheduleDefinition) { d.Kind, d.Expression = "at", "1960-01-01T00:00:00Z" })})
			return err
		}, "expression"},
		{"ListSchedulesTokenDecodesToNUL", func() error {
			_, err := sched.ListSchedules(ctx, &pulsev1.ListSchedulesRequest{PageToken: "AA"})
			return err
		}, "page_token"},
		{"ListSchedulesTokenDecodesToInvalidUTF8", func() error {
			_, err := sched.ListSchedules(ctx, &pulsev1.ListSchedulesRequest{PageToken: "_w"})
			return err
		}, "page_token"},
		{"ListScheduleJobsTokenFarAway", func() error {
			tok := "f_______________" + "AAAAAAAAAAAAAAAAAAAAAA" // max micros, then a zero id
			_, err := sched.ListScheduleJobs(ctx, &pulsev1.ListScheduleJobsRequest{Id: existing.GetId(), PageToken: tok[:32]})
			return err
		}, "page_token"},
	}
	for _, tc := range cases {
		err := tc.call()
		require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%s: %v", tc.name, err)
		require.Equal(t, tc.field, apierr.FieldOf(err), "%s: %v", tc.name, err)
	}
	require.Equal(t, before, b.CountRows(t), "nothing refused was written")

	// The tokens the service hands out still work.
	for range 3 {
		_, err := sched.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: &pulsev1.ScheduleDefinition{
			Name: "s-" + uuid.NewString()[:8], Topic: "reports", Kind: "every", Expression: "1h",
		}})
		require.NoError(t, err)
	}
	page, err := sched.ListSchedules(ctx, &pulsev1.ListSchedulesRequest{Limit: 2})
	require.NoError(t, err)
	require.NotEmpty(t, page.GetNextPageToken())
	_, err = sched.ListSchedules(ctx, &pulsev1.ListSchedulesRequest{Limit: 2, PageToken: page.GetNextPageToken()})
	require.NoError(t, err)
}
