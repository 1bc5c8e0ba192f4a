// Command dispatch-gateway serves workers: it streams them claimed jobs and
// takes their heartbeats and results. Run any number of replicas.
package main

import (
	"os"

	"github.com/pulsequeue/pulse/pkg/server/gogc"
	"github.com/pulsequeue/pulse/pkg/server/service"
	"github.com/pulsequeue/pulse/services/dispatch-gateway/internal/app"
)

func main() {
	// Before anything allocates: this service's GC target unless GOGC is set.
	gogc.Apply(os.LookupEnv, gogc.ServiceDefault)
	service.Main(app.Command())
}
