package api

import (
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/auth"
)

// AccessPolicy is who may call each DispatchService method: workers only.
// Producers' credentials cannot take jobs, and operators' cannot act as a
// worker: a stream, heartbeat or report is made in the caller's own name,
// the identity its leases are bound to (ADR-0012). A method missing here
// is for operators only.
func AccessPolicy() auth.Policy {
	worker := auth.Only(auth.RoleWorker)
	return auth.Policy{
		pulsev1.DispatchService_StreamJobs_FullMethodName:       worker,
		pulsev1.DispatchService_Heartbeat_FullMethodName:        worker,
		pulsev1.DispatchService_ReportResult_FullMethodName:     worker,
		pulsev1.DispatchService_UpdateProgress_FullMethodName:   worker,
		pulsev1.DispatchService_GetParentResults_FullMethodName: worker,
	}
}
