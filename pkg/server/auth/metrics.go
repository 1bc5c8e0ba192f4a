package auth

// MetricsRoles admits any authenticated role to /metrics: what a service
// serves there is about the fleet, not one caller's data, so any
// credential the fleet issued may read it (a Prometheus scraping with a
// worker's or a producer's token). Services use it when PULSE_METRICS_AUTH
// is true; otherwise /metrics is Public.
var MetricsRoles = []Role{RoleProducer, RoleWorker, RoleOperator}

// AdminPolicy is the policy of an admin port that serves only the probes
// and /metrics (dispatch-gateway's): the probes are Public, /metrics is
// Public or, with metricsAuth, for MetricsRoles.
func AdminPolicy(metricsAuth bool) Policy {
	metrics := []Role{Public}
	if metricsAuth {
		metrics = MetricsRoles
	}
	return Policy{
		"GET /healthz": {Public},
		"GET /readyz":  {Public},
		"GET /metrics": metrics,
	}
}
