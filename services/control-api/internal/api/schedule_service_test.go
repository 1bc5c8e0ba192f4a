package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/auth"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
	"github.com/pulsequeue/pulse/services/control-api/internal/apitest"
)

func TestSchedules(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := apitest.New(t, apitest.Options{})
	now := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
	svc := api.NewSchedules(b.Store, func() time.Time { return now }, nil)

	def := &pulsev1.ScheduleDefinition{Name: "hourly", Topic: "t", Kind: "cron", Expression: "@hourly"}
	sc, err := svc.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def, Disabled: true})
	require.NoError(t, err)
	require.False(t, sc.GetEnabled())
	require.Equal(t, now.Add(time.Hour), sc.GetNextRunAt().AsTime())

	_, err = svc.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: def})
	require.Equal(t, apierr.KindAlreadyExists, apierr.KindOf(err))
	require.Equal(t, "name", apierr.FieldOf(err))

	// Enabling starts from the first occurrence after now.
	now = now.Add(5*time.Hour + 30*time.Minute)
	sc, err = svc.EnableSchedule(ctx, &pulsev1.EnableScheduleRequest{Id: sc.GetId()})
	require.NoError(t, err)
	require.Equal(t, time.Date(2030, 5, 1, 18, 0, 0, 0, time.UTC), sc.GetNextRunAt().AsTime())

	// An unchanged expression keeps the cursor; a new one recomputes it.
	def.Topic = "t2"
	sc, err = svc.UpdateSchedule(ctx, &pulsev1.UpdateScheduleRequest{Id: sc.GetId(), Definition: def})
	require.NoError(t, err)
	require.Equal(t, time.Date(2030, 5, 1, 18, 0, 0, 0, time.UTC), sc.GetNextRunAt().AsTime())
	def.Expression = "*/5 * * * *"
	sc, err = svc.UpdateSchedule(ctx, &pulsev1.UpdateScheduleRequest{Id: sc.GetId(), Definition: def})
	require.NoError(t, err)
	require.Equal(t, time.Date(2030, 5, 1, 17, 35, 0, 0, time.UTC), sc.GetNextRunAt().AsTime())

	for _, tc := range []struct {
		def   *pulsev1.ScheduleDefinition
		field string
	}{
		{&pulsev1.ScheduleDefinition{Name: "x", Topic: "t", Kind: "cron", Expression: "0 9 * * *", TimeZone: "Nowhere/City"}, "time_zone"},
		{&pulsev1.ScheduleDefinition{Name: "x", Topic: "t", Kind: "every", Expression: "999ms"}, "expression"},
		{&pulsev1.ScheduleDefinition{Name: "x", Topic: "t", Kind: "cron", Expression: "every day"}, "expression"},
		{&pulsev1.ScheduleDefinition{Name: "x", Topic: "t", Kind: "every", Expression: "1m", Priority: 11}, "priority"},
		{nil, "definition"},
	} {
		_, err := svc.CreateSchedule(ctx, &pulsev1.CreateScheduleRequest{Definition: tc.def})
		require.Equal(t, apierr.KindInvalidArgument, apierr.KindOf(err), "%v", tc.def)
		require.Equal(t, tc.field, apierr.FieldOf(err), "%v: %v", tc.def, err)
	}
	_, err = svc.ListScheduleJobs(ctx, &pulsev1.ListScheduleJobsRequest{Id: sc.GetId(), PageToken: "!!"})
	require.Equal(t, "page_token", apierr.FieldOf(err))
}

func TestScheduleAccessPolicy(t *testing.T) {
	t.Parallel()
	policy := api.AccessPolicy()
	desc := pulsev1.ScheduleService_ServiceDesc
	producer := auth.Identity{Name: "p", Role: auth.RoleProducer}
	operator := auth.Identity{Name: "o", Role: auth.RoleOperator}
	reads := map[string]bool{"GetSchedule": true, "ListSchedules": true, "ListScheduleJobs": true}
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		require.Contains(t, policy, full, "decide who may call %s", m.MethodName)
		require.True(t, operator.Allowed(policy[full]), full)
		require.Equal(t, reads[m.MethodName], producer.Allowed(policy[full]), full)
	}
}
