package mcpserver

import (
	"context"
	"maps"

	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/auth"
)

// The tools, by name.
const (
	ToolDispatchStatus = "dispatch.status"
	ToolDispatchPause  = "dispatch.pause"
	ToolDispatchResume = "dispatch.resume"
	ToolDispatchDrain  = "dispatch.drain_progress"
	ToolDispatchEvents = "dispatch.events"
	ToolJobGet         = "jobs.get"
	ToolJobList        = "jobs.list"
	ToolJobWhy         = "jobs.why_not_running"
	ToolJobRetry       = "jobs.retry"
	ToolJobCancel      = "jobs.cancel"
	ToolDeadLetters    = "jobs.dead_letters"
	ToolTopicList      = "topics.list"
	ToolTopicGet       = "topics.get"
	ToolTopicSetLimit  = "topics.set_limit"
	// ToolTopicSetRateLimit and the four after it set and read the
	// flow-control limits beyond max_running (docs/flow-control.md).
	ToolTopicSetRateLimit = "topics.set_rate_limit"
	ToolTopicSetKeyLimits = "topics.set_key_limits"
	ToolTopicBreakers     = "topics.breakers"
	ToolTopicSetBreaker   = "topics.set_breaker"
	ToolTopicClearBreaker = "topics.clear_breaker"
	ToolQueueClaim        = "queue.claim"
	ToolQueueHeartbeat    = "queue.heartbeat"
	ToolQueueComplete     = "queue.complete"
	ToolQueueFail         = "queue.fail"
)

// ResourceRoles admits callers to every resource: they are reads, which
// producers may make over HTTP too.
var ResourceRoles = auth.Require(auth.RoleProducer)

// ToolRoles is who may call each tool: the roles the HTTP policy admits
// to the route doing the same thing. Reads are for producers (and
// operators); pause, resume, retry, cancel and topic limits (max_running,
// rate, per-key, breakers) for operators; the queue
// tools for workers only, with no operator override, since a claim,
// heartbeat or report acts in the caller's own name (ADR-0012).
func ToolRoles() map[string][]auth.Role {
	read, operate, work := auth.Require(auth.RoleProducer), auth.Require(auth.RoleOperator), auth.Only(auth.RoleWorker)
	return maps.Clone(map[string][]auth.Role{
		ToolDispatchStatus:    read,
		ToolDispatchDrain:     read,
		ToolDispatchEvents:    read,
		ToolDispatchPause:     operate,
		ToolDispatchResume:    operate,
		ToolJobGet:            read,
		ToolJobList:           read,
		ToolJobWhy:            read,
		ToolDeadLetters:       read,
		ToolJobRetry:          operate,
		ToolJobCancel:         operate,
		ToolTopicList:         read,
		ToolTopicGet:          read,
		ToolTopicSetLimit:     operate,
		ToolTopicSetRateLimit: operate,
		ToolTopicSetKeyLimits: operate,
		ToolTopicBreakers:     read,
		ToolTopicSetBreaker:   operate,
		ToolTopicClearBreaker: operate,
		ToolQueueClaim:        work,
		ToolQueueHeartbeat:    work,
		ToolQueueComplete:     work,
		ToolQueueFail:         work,
	})
}

// admit refuses a caller whose role the tool (or resource) does not
// admit. In open mode (authentication off) everyone is admitted, as on
// every other route.
func (s *Server) admit(ctx context.Context, what string, roles []auth.Role) error {
	if s.opts.Open {
		return nil
	}
	id := auth.IdentityFrom(ctx)
	if id.Allowed(roles) {
		return nil
	}
	return apierr.PermissionDenied("role " + string(id.Role) + " may not call " + what + "; it needs " + describe(roles))
}

// describe names the roles admitted, as auth's refusals do.
func describe(roles []auth.Role) string {
	out := ""
	for _, r := range roles {
		if r == auth.RoleProducer || r == auth.RoleWorker || r == auth.RoleOperator {
			if out != "" {
				out += " or "
			}
			out += string(r)
		}
	}
	return out
}
