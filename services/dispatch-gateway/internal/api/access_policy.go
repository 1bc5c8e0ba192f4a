package api

import (
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
)

// AccessPolicy is who may call each DispatchService method: workers (and
// operators). Producers' credentials cannot take jobs. A method missing
// here is for operators only.
func AccessPolicy() auth.Policy {
	worker := auth.Require(auth.RoleWorker)
	return auth.Policy{
		pulsev1.DispatchService_StreamJobs_FullMethodName:   worker,
		pulsev1.DispatchService_Heartbeat_FullMethodName:    worker,
		pulsev1.DispatchService_ReportResult_FullMethodName: worker,
	}
}
