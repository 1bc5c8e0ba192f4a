package ui

import (
	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
)

// retryText puts a job's own backoff in words for its page: "2s doubling
// per attempt, at most 10m, jittered" or "30s between attempts"; empty
// when the job follows the schema's policy.
func retryText(p *pulsev1.RetryPolicy) string {
	switch {
	case p == nil:
		return ""
	case p.GetFixed() != nil:
		return p.GetFixed().AsDuration().String() + " between attempts"
	case p.GetBase() == nil:
		return ""
	}
	limit := "the default cap"
	if m := p.GetMax(); m != nil {
		limit = m.AsDuration().String()
	}
	return p.GetBase().AsDuration().String() + " doubling per attempt, at most " + limit + ", jittered"
}
