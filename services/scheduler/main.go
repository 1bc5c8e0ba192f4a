// Command scheduler turns At, Every and Cron schedules into jobs, each
// occurrence exactly once across any number of replicas, and serves its
// admin surface (/metrics, /healthz, /readyz).
package main

import (
	"github.com/pulsequeue/pulse/pkg/server/service"
	"github.com/pulsequeue/pulse/services/scheduler/internal/app"
)

func main() { service.Main(app.Command()) }
