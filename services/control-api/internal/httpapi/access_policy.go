package httpapi

import "github.com/pulsequeue/pulse/pkg/server/auth"

// AccessPolicy is who may call each route on control-api's HTTP port, for
// auth.HTTPPolicy. It covers the whole mux: the probes and /metrics that
// adminhttp serves stay Public; producers submit and read jobs and dispatch
// state and topics; cancel, retry, pause, resume and topic limits are for
// operators. A route missing here is for operators only.
func AccessPolicy() auth.Policy {
	producer, operator := auth.Require(auth.RoleProducer), auth.Require(auth.RoleOperator)
	return auth.Policy{
		"GET /healthz": {auth.Public},
		"GET /readyz":  {auth.Public},
		"GET /metrics": {auth.Public},

		"POST /v1/jobs":             producer,
		"POST /v1/jobs:batch":       producer,
		"GET /v1/jobs":              producer,
		"GET /v1/jobs/{id}":         producer,
		"POST /v1/jobs/{id}/cancel": operator,
		"POST /v1/jobs/{id}/retry":  operator,
		// Bulk actions by filter (RegisterBulk).
		"POST /v1/jobs/cancel": operator,
		"POST /v1/jobs/delete": operator,

		// Workflows: producers and operators read, operators cancel and
		// retry (RegisterWorkflows).
		"GET /v1/workflows":              producer,
		"GET /v1/workflows/{id}":         producer,
		"POST /v1/workflows/{id}/cancel": operator,
		"POST /v1/workflows/{id}/retry":  operator,

		"GET /v1/dispatch":         producer,
		"GET /v1/dispatch/events":  producer,
		"POST /v1/dispatch/pause":  operator,
		"POST /v1/dispatch/resume": operator,

		// Schedules: producers and operators read, operators write.
		"GET /v1/schedules":               producer,
		"GET /v1/schedules/{id}":          producer,
		"GET /v1/schedules/{id}/jobs":     producer,
		"POST /v1/schedules":              operator,
		"PUT /v1/schedules/{id}":          operator,
		"DELETE /v1/schedules/{id}":       operator,
		"POST /v1/schedules/{id}/enable":  operator,
		"POST /v1/schedules/{id}/disable": operator,

		// Topics: producers and operators read, operators set limits.
		"GET /v1/topics":                    producer,
		"GET /v1/topics/{topic}":            producer,
		"PUT /v1/topics/{topic}":            operator,
		"PUT /v1/topics/{topic}/rate-limit": operator,
		"PUT /v1/topics/{topic}/key-limits": operator,
		// Breakers: producers and operators read, operators set and clear.
		"GET /v1/breakers":                  producer,
		"PUT /v1/topics/{topic}/breaker":    operator,
		"DELETE /v1/topics/{topic}/breaker": operator,

		// MCP (package mcpserver): every role reaches the endpoint, so an
		// unauthenticated request is refused before its body is read; each
		// tool then admits the roles of the route doing the same thing
		// (mcpserver.ToolRoles).
		"/mcp": auth.Require(auth.RoleProducer, auth.RoleWorker),

		// The fallback (FallbackPattern): a path under /v1/ no route has,
		// or a method its route does not take, answers 404 or 405 in the
		// JSON error format to any caller with a role. It runs nothing.
		FallbackPattern: producer,
	}
}
