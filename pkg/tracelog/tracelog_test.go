package tracelog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pulsequeue/pulse/pkg/tracelog"
)

const (
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanID      = "00f067aa0ba902b7"
)

func spanCtx(t *testing.T, tp string) context.Context {
	t.Helper()
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
}

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

func TestALineLoggedWithASpanCarriesItsIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(tracelog.NewHandler(slog.NewJSONHandler(&buf, nil))).With("service", "test")
	ctx := spanCtx(t, traceparent)
	require.True(t, trace.SpanContextFromContext(ctx).IsValid())

	log.InfoContext(ctx, "inside the job", "n", 1)
	log.Info("outside any job")
	log.InfoContext(context.Background(), "no span")
	log.InfoContext(spanCtx(t, "00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "invalid trace id")

	got := lines(t, &buf)
	require.Len(t, got, 4)
	require.Equal(t, traceID, got[0][tracelog.TraceID])
	require.Equal(t, spanID, got[0][tracelog.SpanID])
	require.Equal(t, "test", got[0]["service"])
	require.InDelta(t, 1, got[0]["n"], 0)
	for _, l := range got[1:] {
		require.NotContains(t, l, tracelog.TraceID, "%v", l)
		require.NotContains(t, l, tracelog.SpanID, "%v", l)
	}
}

func TestWrappingTwiceWritesTheIDsOnce(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := tracelog.NewHandler(slog.NewJSONHandler(&buf, nil))
	require.Same(t, h, tracelog.NewHandler(h))
	slog.New(tracelog.NewHandler(h)).InfoContext(spanCtx(t, traceparent), "once")
	require.Equal(t, 1, strings.Count(buf.String(), `"trace_id"`), buf.String())
}

func TestAttrsAndGroupsKeepTheWrapper(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(tracelog.NewHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx := spanCtx(t, traceparent)
	log.With("a", 1).WarnContext(ctx, "with attrs")
	log.WithGroup("g").WarnContext(ctx, "in a group", "b", 2)
	log.InfoContext(ctx, "below the level")
	got := lines(t, &buf)
	require.Len(t, got, 2, "the wrapped handler's level still filters")
	require.Equal(t, traceID, got[0][tracelog.TraceID])
	g, ok := got[1]["g"].(map[string]any)
	require.True(t, ok, "%v", got[1])
	require.Equal(t, traceID, g[tracelog.TraceID])
}
