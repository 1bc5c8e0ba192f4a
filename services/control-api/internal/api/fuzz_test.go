package api_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/grpcserver"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
)

// The fuzz targets drive control-api's gRPC services with arbitrary
// request messages against a real database and hold them to three rules:
// never codes.Internal (or Unknown); a refused request writes nothing; a
// refused submit never fails the submits around it. A message proto3
// cannot carry (a string field with invalid UTF-8, which gRPC refuses
// before any handler runs) is handed to the service in-process, as a
// buggy or hostile transport might.

type fuzzBundle struct {
	*apitest.Bundle
	schedules *api.Schedules
	dispatch  *api.DispatchControl
	control   pulsev1.ControlServiceClient
	sched     pulsev1.ScheduleServiceClient
	disp      pulsev1.DispatchControlServiceClient
}

func setupFuzz(f *testing.F) *fuzzBundle {
	f.Helper()
	b := &fuzzBundle{Bundle: apitest.New(f, apitest.Options{MaxArgsBytes: maxArgsBytes, MaxBatchJobs: 10})}
	b.schedules = api.NewSchedules(b.Store, nil, nil)
	b.dispatch = api.NewDispatchControl(b.Store, api.DispatchOptions{})
	srv := grpcserver.New(grpcserver.Options{})
	pulsev1.RegisterControlServiceServer(srv.GRPC(), b.Service)
	pulsev1.RegisterScheduleServiceServer(srv.GRPC(), b.schedules)
	pulsev1.RegisterDispatchControlServiceServer(srv.GRPC(), b.dispatch)
	conn := apitest.Dial(f, srv)
	b.control = pulsev1.NewControlServiceClient(conn)
	b.sched = pulsev1.NewScheduleServiceClient(conn)
	b.disp = pulsev1.NewDispatchControlServiceClient(conn)
	return b
}

// call sends req over the wire when proto3 can carry it, else in-process.
func call(req proto.Message, wire, direct func() error) error {
	if _, err := proto.Marshal(req); err == nil {
		return wire()
	}
	return direct()
}

// requireAnswered checks err is an answer about the request, never a
// server fault, and returns its code.
func requireAnswered(t *testing.T, err error) codes.Code {
	t.Helper()
	code := apierr.GRPCStatus(err).Code()
	switch code {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists:
		return code
	}
	t.Fatalf("%v: %v", code, err)
	return code
}

func fuzzSpec(topic string, args []byte, key string, runAtSec int64, runAtNanos int32, prio int32, maxAttempts int32) *pulsev1.JobSpec {
	s := &pulsev1.JobSpec{Topic: topic, Args: args, IdempotencyKey: key, Priority: prio, HasPriority: prio != 0, MaxAttempts: maxAttempts}
	if runAtSec != 0 || runAtNanos != 0 {
		s.RunAt = &timestamppb.Timestamp{Seconds: runAtSec, Nanos: runAtNanos}
	}
	return s
}

// specSeeds are the poisons of the tests plus valid specs.
func specSeeds(_ *testing.F, add func(topic string, args []byte, key string, runAtSec int64)) {
	add("email.send", []byte(`{"to":"a@example.com"}`), "", 0)
	add("email.send", []byte(`{"path":"C:\\u0000dir"}`), "order-42", 1900000000)
	add("email.send", []byte("{\"to\":\"\xff\"}"), "", 0)
	add("email.send", []byte(`{"\u0000":1}`), "", 0)
	add("email.send", []byte(`{"to":"a\u0000b"}`), "", 0)
	add("email.send", []byte(`{"n":1e1000000}`), "", 0)
	add("email.send", []byte(`{"to":"\ud800"}`), "", 0)
	add("email.send", []byte(`{}`), "", 1<<40)
	add("email.send", []byte(`{}`), "", -1<<40)
	add("email.send", []byte(`{}`), "k\x00", 0)
	add("email.send", []byte(`{}`), "k\xc3", 0)
	add("email\xff", []byte(`{}`), "", 0)
	add("email\x00", nil, "", 0)
	add("", []byte(`[1]`), "", 0)
}

func FuzzSubmitJob(f *testing.F) {
	specSeeds(f, func(topic string, args []byte, key string, runAtSec int64) {
		f.Add(topic, args, key, runAtSec, int32(0), int32(0), int32(0))
	})
	f.Add("t", []byte(`{}`), "", int64(0), int32(-1), int32(11), int32(101))
	b := setupFuzz(f)
	f.Fuzz(func(t *testing.T, topic string, args []byte, key string, runAtSec int64, runAtNanos, prio, maxAttempts int32) {
		ctx := t.Context()
		before := b.CountJobs(t)
		req := &pulsev1.SubmitJobRequest{Job: fuzzSpec(topic, args, key, runAtSec, runAtNanos, prio, maxAttempts)}

		// Three good submits alongside, coalesced with it when it is
		// accepted: a refused submit never fails them.
		const companions = 3
		var wg sync.WaitGroup
		goodErrs := make([]error, companions)
		for i := range companions {
			wg.Go(func() {
				_, goodErrs[i] = b.control.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: spec("companion")})
			})
		}
		err := call(req,
			func() error { _, err := b.control.SubmitJob(ctx, req); return err },
			func() error { _, err := b.Service.SubmitJob(ctx, req); return err })
		wg.Wait()
		for _, e := range goodErrs {
			require.NoError(t, e, "a good submit failed beside %v", err)
		}
		code := requireAnswered(t, err)
		written := b.CountJobs(t) - before
		if code != codes.OK {
			require.Equal(t, companions, written, "a refused submit wrote a row: %v", err)
			return
		}
		require.Contains(t, []int{companions, companions + 1}, written) // +0: a duplicate key
	})
}

func FuzzSubmitJobs(f *testing.F) {
	specSeeds(f, func(topic string, args []byte, key string, runAtSec int64) {
		f.Add(topic, args, key, runAtSec, uint8(1))
	})
	b := setupFuzz(f)
	f.Fuzz(func(t *testing.T, topic string, args []byte, key string, runAtSec int64, at uint8) {
		ctx := t.Context()
		before := b.CountJobs(t)
		specs := []*pulsev1.JobSpec{spec("a"), spec("b"), spec("c"), spec("d")}
		k := int(at) % len(specs)
		specs[k] = fuzzSpec(topic, args, key, runAtSec, 0, 0, 0)
		req := &pulsev1.SubmitJobsRequest{Jobs: specs}
		err := call(req,
			func() error { _, err := b.control.SubmitJobs(ctx, req); return err },
			func() error { _, err := b.Service.SubmitJobs(ctx, req); return err })
		code := requireAnswered(t, err)
		written := b.CountJobs(t) - before
		if code != codes.OK {
			require.Zero(t, written, "a refused batch wrote rows: %v", err)
			require.True(t, strings.HasPrefix(apierr.GRPCStatus(err).Message(), fmt.Sprintf("jobs[%d]", k)),
				"the refusal names the spec at fault, jobs[%d]: %v", k, err)
			return
		}
		require.Contains(t, []int{3, 4}, written)
	})
}

func FuzzListAndJobIDs(f *testing.F) {
	f.Add("email.send", int32(0), int32(0), "", "01890a5d-ac96-774b-bcce-b302099a8057")
	f.Add("a\x00", int32(42), int32(-1), "AAAAAAAAAAAAAAAAAAAAAB", "\xff")
	f.Add("", int32(1), int32(501), "_w", "\x00")
	f.Add("t", int32(3), int32(2), "AAAAAAAAAAAA\nAAAAAAAAAA", "not-a-uuid")
	b := setupFuzz(f)
	_, err := b.control.SubmitJob(f.Context(), &pulsev1.SubmitJobRequest{Job: spec("seed")})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, topic string, status, limit int32, pageToken, id string) {
		ctx := t.Context()
		before := b.CountRows(t)
		list := &pulsev1.ListJobsRequest{Topic: topic, Status: pulsev1.JobStatus(status), Limit: limit, PageToken: pageToken}
		requireAnswered(t, call(list,
			func() error { _, err := b.control.ListJobs(ctx, list); return err },
			func() error { _, err := b.Service.ListJobs(ctx, list); return err }))
		get := &pulsev1.GetJobRequest{Id: id}
		requireAnswered(t, call(get,
			func() error { _, err := b.control.GetJob(ctx, get); return err },
			func() error { _, err := b.Service.GetJob(ctx, get); return err }))
		cancel := &pulsev1.CancelJobRequest{Id: id}
		requireAnswered(t, call(cancel,
			func() error { _, err := b.control.CancelJob(ctx, cancel); return err },
			func() error { _, err := b.Service.CancelJob(ctx, cancel); return err }))
		retry := &pulsev1.RetryJobRequest{Id: id}
		requireAnswered(t, call(retry,
			func() error { _, err := b.control.RetryJob(ctx, retry); return err },
			func() error { _, err := b.Service.RetryJob(ctx, retry); return err }))
		require.Equal(t, before, b.CountRows(t))
	})
}

func FuzzPauseResume(f *testing.F) {
	f.Add("deploy", "", int32(0), int64(0), int32(0), int64(0), false)
	f.Add("smtp down", "mail", int32(2), int64(3600), int32(0), int64(0), false)
	f.Add("deploy\x00", "", int32(0), int64(0), int32(0), int64(0), false)
	f.Add("deploy\xc3", "mail\x00", int32(0), int64(0), int32(0), int64(0), false)
	f.Add("r", "", int32(0), int64(0), int32(0), int64(236000000000), false)
	f.Add("r", "", int32(0), int64(-5), int32(-1), int64(0), false)
	f.Add("r", "", int32(9), int64(315576000001), int32(0), int64(1), false)
	f.Add("", "\xff", int32(0), int64(0), int32(0), int64(0), true)
	b := setupFuzz(f)
	f.Fuzz(func(t *testing.T, reason, topic string, mode int32, forSec int64, forNanos int32, untilSec int64, resume bool) {
		ctx := t.Context()
		before := b.CountRows(t)
		var err error
		if resume {
			req := &pulsev1.ResumeDispatchRequest{Topic: topic}
			err = call(req,
				func() error { _, err := b.disp.ResumeDispatch(ctx, req); return err },
				func() error { _, err := b.dispatch.ResumeDispatch(ctx, req); return err })
		} else {
			req := &pulsev1.PauseDispatchRequest{Reason: reason, Topic: topic, Mode: pulsev1.PauseMode(mode)}
			if forSec != 0 || forNanos != 0 {
				req.PauseFor = &durationpb.Duration{Seconds: forSec, Nanos: forNanos}
			}
			if untilSec != 0 {
				req.Until = &timestamppb.Timestamp{Seconds: untilSec}
			}
			err = call(req,
				func() error { _, err := b.disp.PauseDispatch(ctx, req); return err },
				func() error { _, err := b.dispatch.PauseDispatch(ctx, req); return err })
		}
		if requireAnswered(t, err) != codes.OK {
			require.Equal(t, before, b.CountRows(t), "a refused request wrote: %v", err)
		}
	})
}

func FuzzSchedules(f *testing.F) {
	add := func(name, topic string, args []byte, kind, expression, tz, token string) {
		f.Add(name, topic, args, kind, expression, tz, token, int32(0), int32(0))
	}
	add("nightly", "reports", []byte(`{"full":true}`), "cron", "0 3 * * *", "Europe/Paris", "")
	add("every", "reports", nil, "every", "90s", "", "bmlnaHRseQ")
	add("once", "reports", nil, "at", "2031-01-01T00:00:00Z", "", "AA")
	add("never", "reports", nil, "cron", "0 0 30 2 *", "", "_w")
	add("far", "reports", nil, "at", "9500-01-01T00:00:00Z", "", "")
	add("old", "reports", nil, "at", "1960-01-01T00:00:00Z", "", "")
	add("a\x00", "t\xff", []byte(`{"\u0000":1}`), "cron", "@hourly\x00", "UTC\x00", "f_______________AAAAAAAAAAAAAAAA")
	add("n", "t", []byte(`{"n":1e1000000}`), "every", "1h", "\xff", "")
	add("n", "t", []byte(`{"s":"\udc00"}`), "kind\xff", "", "", "")
	b := setupFuzz(f)
	existing, err := b.schedules.CreateSchedule(f.Context(), &pulsev1.CreateScheduleRequest{Definition: &pulsev1.ScheduleDefinition{
		Name: "existing", Topic: "reports", Kind: "every", Expression: "1h",
	}})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, name, topic string, args []byte, kind, expression, tz, token string, prio, maxAttempts int32) {
		ctx := t.Context()
		def := &pulsev1.ScheduleDefinition{Name: name, Topic: topic, Args: args, Kind: kind, Expression: expression,
			TimeZone: tz, Priority: prio, MaxAttempts: maxAttempts}

		before := b.CountRows(t)
		create := &pulsev1.CreateScheduleRequest{Definition: def}
		err := call(create,
			func() error { _, err := b.sched.CreateSchedule(ctx, create); return err },
			func() error { _, err := b.schedules.CreateSchedule(ctx, create); return err })
		if requireAnswered(t, err) != codes.OK {
			require.Equal(t, before, b.CountRows(t), "a refused create wrote: %v", err)
		}

		was, err := b.schedules.GetSchedule(ctx, &pulsev1.GetScheduleRequest{Id: existing.GetId()})
		require.NoError(t, err)
		update := &pulsev1.UpdateScheduleRequest{Id: existing.GetId(), Definition: def}
		err = call(update,
			func() error { _, err := b.sched.UpdateSchedule(ctx, update); return err },
			func() error { _, err := b.schedules.UpdateSchedule(ctx, update); return err })
		if requireAnswered(t, err) != codes.OK {
			now, gerr := b.schedules.GetSchedule(ctx, &pulsev1.GetScheduleRequest{Id: existing.GetId()})
			require.NoError(t, gerr)
			require.True(t, proto.Equal(was, now), "a refused update changed the schedule: %v", err)
		}

		list := &pulsev1.ListSchedulesRequest{PageToken: token}
		requireAnswered(t, call(list,
			func() error { _, err := b.sched.ListSchedules(ctx, list); return err },
			func() error { _, err := b.schedules.ListSchedules(ctx, list); return err }))
		jobs := &pulsev1.ListScheduleJobsRequest{Id: existing.GetId(), PageToken: token}
		requireAnswered(t, call(jobs,
			func() error { _, err := b.sched.ListScheduleJobs(ctx, jobs); return err },
			func() error { _, err := b.schedules.ListScheduleJobs(ctx, jobs); return err }))
	})
}
