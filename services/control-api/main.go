// Command control-api serves pulse's producer and operator API (gRPC and
// HTTP/JSON) and applies the schema migrations (`control-api migrate`).
package main

import (
	"os"

	"github.com/pulsequeue/pulse/pkg/server/gogc"
	"github.com/pulsequeue/pulse/pkg/server/service"

	"github.com/pulsequeue/pulse/services/control-api/internal/app"
)

func main() {
	// Before anything allocates: this service's GC target unless GOGC is set.
	gogc.Apply(os.LookupEnv, gogc.ServiceDefault)
	service.Main(app.Command())
}
