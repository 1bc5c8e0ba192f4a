package fire_test

import (
	"os"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func TestMain(m *testing.M) {
	// A recording provider, so fire spans have trace ids to hand to jobs.
	otel.SetTracerProvider(sdktrace.NewTracerProvider())
	os.Exit(pgtest.Main(m))
}
