package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Role is what an identity may do. Roles do not nest: a Policy lists every
// role it admits, except that operators are admitted everywhere.
type Role string

// The roles. Public is not a role anyone holds: a Policy entry containing
// it admits callers without credentials.
const (
	// RoleProducer submits jobs and reads them.
	RoleProducer Role = "producer"
	// RoleWorker streams jobs, heartbeats and reports results.
	RoleWorker Role = "worker"
	// RoleOperator may do everything, including cancel, retry, pause and
	// resume.
	RoleOperator Role = "operator"
	// Public marks a method or route that needs no credentials (probes,
	// metrics).
	Public Role = "public"
)

// exclusive marks a Policy entry built by Only: no operator override. It
// is not a role anyone can hold (ParseRole refuses it).
const exclusive Role = "!exclusive"

// ParseRole accepts the role names used in PULSE_AUTH_USERS and
// PULSE_AUTH_TOKENS.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleProducer, RoleWorker, RoleOperator:
		return r, nil
	}
	return "", fmt.Errorf("role %q is not producer, worker or operator", s)
}

// Identity is an authenticated caller: the name from its credentials entry,
// which is what audit records show as the actor, and its role.
type Identity struct {
	Name string
	Role Role
}

// LeaseHolder is what a worker's leases are held as (jobs.locked_by) when
// authentication is on: the name of the identity it authenticated as, a
// slash, and the worker id it chose, "alice/worker-1". A name cannot
// contain a slash (PULSE_AUTH_* entries are checked), so the first slash
// ends the name, and no identity can hold or name another's leases,
// whatever worker id it sends (ADR-0012).
func LeaseHolder(name, workerID string) string { return name + "/" + workerID }

// Anonymous is every caller in open mode: an operator, so a local fleet
// started without credentials is fully usable.
var Anonymous = Identity{Name: "anonymous", Role: RoleOperator}

// unauthenticated is attached to requests for Public routes while
// authentication is on: it has a name for logs and no role at all, so it is
// never mistaken for Anonymous.
var unauthenticated = Identity{Name: "anonymous"}

// Allowed reports whether id may call something the policy admits roles
// to. Operators are allowed everywhere except where the entry was built
// by Only; an empty list admits nobody else.
func (id Identity) Allowed(roles []Role) bool {
	if slices.Contains(roles, Public) {
		return true
	}
	if id.Role == "" {
		return false
	}
	if slices.Contains(roles, exclusive) {
		return slices.Contains(roles, id.Role)
	}
	return id.Role == RoleOperator || slices.Contains(roles, id.Role)
}

type identityKey struct{}

// WithIdentity returns ctx carrying id; the interceptors and middleware
// call it, and tests of handlers may too.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the caller the interceptors or middleware attached
// to ctx. A ctx carrying none yields Anonymous: that happens only in open
// mode (local development) or when a test calls a handler directly, since
// with authentication on every admitted request carries its identity.
func IdentityFrom(ctx context.Context) Identity {
	if id, ok := ctx.Value(identityKey{}).(Identity); ok {
		return id
	}
	return Anonymous
}

// Require lists the roles a method or route admits, for a Policy entry.
// Operators are admitted everywhere, so they are added when missing.
func Require(roles ...Role) []Role {
	out := slices.Clone(roles)
	if !slices.Contains(out, RoleOperator) && !slices.Contains(out, Public) {
		out = append(out, RoleOperator)
	}
	return out
}

// Only lists the roles a method or route admits with no operator
// override, for calls made in a role's own name: a worker's heartbeat and
// report act on the leases of the identity that calls, so an operator's
// credentials must not make them (ADR-0012). Operators keep their own
// routes.
func Only(roles ...Role) []Role {
	return append(slices.Clone(roles), exclusive)
}

// describe names the roles admitted, for a PermissionDenied message.
func describe(roles []Role) string {
	if len(roles) == 0 {
		return string(RoleOperator)
	}
	names := make([]string, 0, len(roles)+1)
	for _, r := range roles {
		if r != exclusive {
			names = append(names, string(r))
		}
	}
	if !slices.Contains(roles, RoleOperator) && !slices.Contains(roles, exclusive) {
		names = append(names, string(RoleOperator))
	}
	return strings.Join(names, " or ")
}
