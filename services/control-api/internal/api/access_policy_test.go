package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"

	"github.com/pulsequeue/pulse/services/control-api/internal/api"
)

func TestAccessPolicy(t *testing.T) {
	t.Parallel()

	t.Run("NamesEveryControlServiceMethod", func(t *testing.T) {
		t.Parallel()
		policy := api.AccessPolicy()
		desc := pulsev1.ControlService_ServiceDesc
		for _, m := range desc.Methods {
			require.Contains(t, policy, "/"+desc.ServiceName+"/"+m.MethodName, "decide who may call %s", m.MethodName)
		}
		for _, m := range pulsev1.TopicService_ServiceDesc.Methods {
			require.Contains(t, policy, "/"+pulsev1.TopicService_ServiceDesc.ServiceName+"/"+m.MethodName, "decide who may call %s", m.MethodName)
		}
		for _, s := range desc.Streams {
			require.Contains(t, policy, "/"+desc.ServiceName+"/"+s.StreamName, "decide who may call %s", s.StreamName)
		}
	})

	t.Run("ProducersSubmitAndReadOperatorsAlsoCancelAndRetry", func(t *testing.T) {
		t.Parallel()
		policy := api.AccessPolicy()
		producer := auth.Identity{Name: "p", Role: auth.RoleProducer}
		worker := auth.Identity{Name: "w", Role: auth.RoleWorker}
		for _, m := range []string{
			pulsev1.ControlService_SubmitJob_FullMethodName, pulsev1.ControlService_SubmitJobs_FullMethodName,
			pulsev1.ControlService_GetJob_FullMethodName, pulsev1.ControlService_ListJobs_FullMethodName,
			pulsev1.ControlService_GetWorkflow_FullMethodName, pulsev1.ControlService_ListWorkflows_FullMethodName,
		} {
			require.True(t, producer.Allowed(policy[m]), m)
			require.False(t, worker.Allowed(policy[m]), m)
		}
		for _, m := range []string{
			pulsev1.ControlService_CancelJob_FullMethodName, pulsev1.ControlService_RetryJob_FullMethodName,
			pulsev1.ControlService_CancelWorkflow_FullMethodName, pulsev1.ControlService_RetryWorkflow_FullMethodName,
		} {
			require.Equal(t, []auth.Role{auth.RoleOperator}, policy[m], m)
		}
	})
}
