// Package tracelog adds the trace to log lines: a [log/slog] handler that
// writes the trace_id and span_id of the span in a record's context, so
// every line logged with a job's context (slog's *Context methods) can be
// found from the job's trace, and the trace from the line.
//
//	logger := slog.New(tracelog.NewHandler(slog.NewJSONHandler(os.Stdout, nil)))
//	logger.InfoContext(ctx, "charged the card", "amount", 42)
//	// {"time":…,"level":"INFO","msg":"charged the card","amount":42,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}
//
// The pulse worker wraps its logger with it, and a handler's context
// carries its job's process span, so a handler that logs through the same
// logger with its ctx gets the job's trace id on every line. pulse's
// services write their logs through it too.
package tracelog

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// The attribute keys, as the OpenTelemetry log data model names the
// fields.
const (
	TraceID = "trace_id"
	SpanID  = "span_id"
)

// Handler is a slog.Handler that adds TraceID and SpanID to each record
// whose context holds a valid span context (a recording span or one
// extracted from a traceparent). Records without one pass through
// unchanged. Inside a group (WithGroup) the two attributes land in the
// group, like every attribute added there.
type Handler struct {
	next slog.Handler
}

// NewHandler wraps next. Wrapping a Handler again returns it as it is, so
// the ids are written once.
func NewHandler(next slog.Handler) *Handler {
	if h, ok := next.(*Handler); ok {
		return h
	}
	return &Handler{next: next}
}

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle adds the ids of ctx's span context, if valid, and hands the
// record on.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(TraceID, sc.TraceID().String()), slog.String(SpanID, sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a Handler whose wrapped handler has attrs.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs)}
}

// WithGroup returns a Handler whose wrapped handler opens group name.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name)}
}

// Unwrap returns the wrapped handler.
func (h *Handler) Unwrap() slog.Handler { return h.next }
