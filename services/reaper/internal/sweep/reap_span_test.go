package sweep

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/telemetry/telemetrytest"
)

// TestReapSpanJoinsTheJobsTrace proves a reaped job's span is in the job's
// own trace (child of the context stored at submit) and linked to the sweep.
func TestReapSpanJoinsTheJobsTrace(t *testing.T) {
	rec, tp := telemetrytest.Record(t)
	submit, traceParent := telemetrytest.Submitted(tp)
	sweepCtx, sweep := tp.Tracer("test").Start(t.Context(), "sweep")
	traceReaped(sweepCtx, time.Now(), []jobstore.Reaped{{
		ID: uuid.New(), Topic: "t", Status: pulsetype.StatusRetrying, Attempt: 1, TraceParent: traceParent,
	}})
	sweep.End()

	var reap sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "reap t" {
			reap = s
		}
	}
	require.NotNil(t, reap)
	telemetrytest.RequireJoinsJob(t, reap, submit, sweep.SpanContext())
}
