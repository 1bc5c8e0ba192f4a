package auth

import (
	"net/http"
	"strings"
)

// Policy maps what a caller may call to the roles admitted: full gRPC
// method names ("/pulse.v1.ControlService/CancelJob") for the interceptors,
// Go ServeMux patterns ("POST /v1/jobs/{id}/cancel") for HTTPPolicy. Build
// entries with Require. A method or route missing from the policy admits
// operators only.
type Policy map[string][]Role

// The gRPC services every server registers, whatever its policy. With
// authentication on, health answers any authenticated caller (the
// unauthenticated probes are HTTP /healthz and /readyz) and reflection
// answers operators only; in open mode both are open, like everything.
var (
	healthService      = "/grpc.health.v1.Health/"
	reflectionServices = []string{
		"/grpc.reflection.v1.ServerReflection/",
		"/grpc.reflection.v1alpha.ServerReflection/",
	}
	anyRole = []Role{RoleProducer, RoleWorker, RoleOperator}
)

// method returns the roles the policy admits to a full gRPC method name.
func (p Policy) method(fullMethod string) []Role {
	if strings.HasPrefix(fullMethod, healthService) {
		return anyRole
	}
	for _, prefix := range reflectionServices {
		if strings.HasPrefix(fullMethod, prefix) {
			return nil // operators only
		}
	}
	return p[fullMethod]
}

// HTTPPolicy turns a policy of ServeMux patterns into the function
// Middleware asks. The request is matched the way http.ServeMux matches
// it, so each request gets the entry of exactly the pattern that will serve
// it; a request that matches no entry (a route added without one, or a
// path that does not exist) admits operators only. Mark the probes and
// /metrics Public when they share the mux. It panics, as ServeMux does, on
// an invalid or conflicting pattern.
func HTTPPolicy(p Policy) func(r *http.Request) []Role {
	mux := http.NewServeMux()
	for pattern := range p {
		mux.Handle(pattern, http.NotFoundHandler())
	}
	return func(r *http.Request) []Role {
		_, pattern := mux.Handler(r)
		if pattern == "" {
			return nil
		}
		return p[pattern]
	}
}
