package ui

import "github.com/pulsequeue/pulse/pkg/server/auth"

// AccessPolicy is who may call each dashboard route, for auth.HTTPPolicy
// (merged with the JSON API's policy in app): producers see every page,
// operators alone post. The stylesheet and script carry no data and are
// public, so a browser can render the 401 page's look before login.
func AccessPolicy() auth.Policy {
	producer, operator := auth.Require(auth.RoleProducer), auth.Require(auth.RoleOperator)
	return auth.Policy{
		"GET /ui":                {auth.Public}, // a redirect to /ui/
		"GET /ui/static/{file}":  {auth.Public},
		"GET /ui/{$}":            producer,
		"GET /ui/live":           producer,
		"GET /ui/jobs":           producer,
		"GET /ui/jobs/{id}":      producer,
		"GET /ui/dead-letters":   producer,
		"GET /ui/schedules":      producer,
		"GET /ui/audit":          producer,
		"GET /ui/workflows":      producer,
		"GET /ui/workflows/{id}": producer,
		// The confirmation page of a bulk action: the first step of an
		// operator's action, so for operators.
		"GET /ui/bulk/{action}": operator,

		"POST /ui/dispatch/pause":         operator,
		"POST /ui/dispatch/resume":        operator,
		"POST /ui/jobs/{id}/cancel":       operator,
		"POST /ui/jobs/{id}/retry":        operator,
		"POST /ui/dead-letters/retry":     operator,
		"POST /ui/schedules/{id}/enable":  operator,
		"POST /ui/schedules/{id}/disable": operator,
		"POST /ui/topics/limit":           operator,
		"POST /ui/bulk/{action}":          operator,
		"POST /ui/workflows/{id}/cancel":  operator,
		"POST /ui/workflows/{id}/retry":   operator,
	}
}
