package api

import (
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
)

// AccessPolicy is who may call each ControlService method: producers submit
// and read (jobs, dispatch state, topics), operators also cancel, retry,
// pause, resume and set topic limits. A method missing here is for
// operators only, so a new RPC must be added to be usable by producers.
func AccessPolicy() auth.Policy {
	return auth.Policy{
		pulsev1.ControlService_SubmitJob_FullMethodName:  auth.Require(auth.RoleProducer),
		pulsev1.ControlService_SubmitJobs_FullMethodName: auth.Require(auth.RoleProducer),
		pulsev1.ControlService_GetJob_FullMethodName:     auth.Require(auth.RoleProducer),
		pulsev1.ControlService_WaitJob_FullMethodName:    auth.Require(auth.RoleProducer),
		pulsev1.ControlService_ListJobs_FullMethodName:   auth.Require(auth.RoleProducer),
		pulsev1.ControlService_CancelJob_FullMethodName:  auth.Require(auth.RoleOperator),
		pulsev1.ControlService_RetryJob_FullMethodName:   auth.Require(auth.RoleOperator),

		// Workflows: producers read, operators cancel and retry.
		pulsev1.ControlService_GetWorkflow_FullMethodName:    auth.Require(auth.RoleProducer),
		pulsev1.ControlService_ListWorkflows_FullMethodName:  auth.Require(auth.RoleProducer),
		pulsev1.ControlService_CancelWorkflow_FullMethodName: auth.Require(auth.RoleOperator),
		pulsev1.ControlService_RetryWorkflow_FullMethodName:  auth.Require(auth.RoleOperator),

		pulsev1.DispatchControlService_GetDispatchState_FullMethodName:   auth.Require(auth.RoleProducer),
		pulsev1.DispatchControlService_ListDispatchEvents_FullMethodName: auth.Require(auth.RoleProducer),
		pulsev1.DispatchControlService_PauseDispatch_FullMethodName:      auth.Require(auth.RoleOperator),
		pulsev1.DispatchControlService_ResumeDispatch_FullMethodName:     auth.Require(auth.RoleOperator),

		// Schedules: producers and operators read, operators write.
		pulsev1.ScheduleService_GetSchedule_FullMethodName:      auth.Require(auth.RoleProducer),
		pulsev1.ScheduleService_ListSchedules_FullMethodName:    auth.Require(auth.RoleProducer),
		pulsev1.ScheduleService_ListScheduleJobs_FullMethodName: auth.Require(auth.RoleProducer),
		pulsev1.ScheduleService_CreateSchedule_FullMethodName:   auth.Require(auth.RoleOperator),
		pulsev1.ScheduleService_UpdateSchedule_FullMethodName:   auth.Require(auth.RoleOperator),
		pulsev1.ScheduleService_EnableSchedule_FullMethodName:   auth.Require(auth.RoleOperator),
		pulsev1.ScheduleService_DisableSchedule_FullMethodName:  auth.Require(auth.RoleOperator),
		pulsev1.ScheduleService_DeleteSchedule_FullMethodName:   auth.Require(auth.RoleOperator),

		// Topics: producers read, operators set limits.
		pulsev1.TopicService_ListTopics_FullMethodName:        auth.Require(auth.RoleProducer),
		pulsev1.TopicService_SetTopicLimit_FullMethodName:     auth.Require(auth.RoleOperator),
		pulsev1.TopicService_SetTopicRateLimit_FullMethodName: auth.Require(auth.RoleOperator),
		pulsev1.TopicService_SetTopicKeyLimits_FullMethodName: auth.Require(auth.RoleOperator),
		// Breakers: producers read, operators set and clear.
		pulsev1.TopicService_ListTopicBreakers_FullMethodName: auth.Require(auth.RoleProducer),
		pulsev1.TopicService_SetTopicBreaker_FullMethodName:   auth.Require(auth.RoleOperator),
		pulsev1.TopicService_ClearTopicBreaker_FullMethodName: auth.Require(auth.RoleOperator),
	}
}
