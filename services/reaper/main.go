// Command reaper recovers jobs whose worker lease lapsed (retry or
// dead-letter) and deletes finished jobs past their retention age. Any
// number of replicas may run at once.
package main

import (
	"github.com/pulsequeue/pulse/pkg/server/service"
	"github.com/pulsequeue/pulse/services/reaper/internal/app"
)

func main() { service.Main(app.Command()) }
