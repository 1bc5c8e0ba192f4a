// Package middleware holds example worker middleware and client
// interceptors for the pulse SDK (pulse.Worker.Use,
// pulse.WithEnqueueInterceptor): logging, metrics, a panic policy and a
// per-tenant context carried from producer to handler. They use only the
// SDK and the standard library; copy and adapt them. example_test.go
// shows each at work, and ../demo-middleware runs them against a fleet.
package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/pulsequeue/pulse/pkg/pulse"
)

// timedOut reports whether the attempt ran out of its timeout: the
// handler returns what it likes (often ctx.Err()), and the SDK fails the
// attempt with a pulse.TimeoutError after the middleware has returned, so
// middleware asks the context why it ended.
func timedOut(ctx context.Context, err error) bool {
	return errors.Is(err, pulse.ErrJobTimedOut) || errors.Is(context.Cause(ctx), pulse.ErrJobTimedOut)
}

// Logging logs every attempt when it ends: topic, job, attempt, how long
// it took, the tenant (inside Tenant), and its error. A timed-out attempt
// is a warning like any failure, marked timed_out.
func Logging(logger *slog.Logger) pulse.Middleware {
	return func(next pulse.Handler) pulse.Handler {
		return func(ctx context.Context, job *pulse.Job) error {
			start := time.Now()
			err := next(ctx, job)
			attrs := []any{"topic", job.Topic, "job", job.ID, "attempt", job.Attempt, "took", time.Since(start).Round(time.Millisecond)}
			if tenant, ok := TenantFrom(ctx); ok {
				attrs = append(attrs, "tenant", tenant)
			}
			switch {
			case err == nil:
				logger.InfoContext(ctx, "job done", attrs...)
			case pulse.IsPermanent(err):
				logger.ErrorContext(ctx, "job failed for good", append(attrs, "err", err)...)
			default:
				logger.WarnContext(ctx, "job attempt failed", append(attrs, "err", err, "timed_out", timedOut(ctx, err))...)
			}
			return err
		}
	}
}

// Metrics counts attempts per topic and outcome and sums their time. A
// real worker would feed Prometheus or OpenTelemetry from the same place;
// Snapshot is enough to see what the middleware sees.
type Metrics struct {
	mu     sync.Mutex
	counts map[string]*TopicCounts
}

// TopicCounts is one topic's attempts so far.
type TopicCounts struct {
	Done, Failed, Permanent, TimedOut int
	Busy                              time.Duration
}

// Middleware records every attempt.
func (m *Metrics) Middleware() pulse.Middleware {
	return func(next pulse.Handler) pulse.Handler {
		return func(ctx context.Context, job *pulse.Job) error {
			start := time.Now()
			err := next(ctx, job)
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.counts == nil {
				m.counts = map[string]*TopicCounts{}
			}
			c := m.counts[job.Topic]
			if c == nil {
				c = &TopicCounts{}
				m.counts[job.Topic] = c
			}
			c.Busy += time.Since(start)
			switch {
			case err == nil:
				c.Done++
			case pulse.IsPermanent(err):
				c.Permanent++
			case timedOut(ctx, err):
				c.TimedOut++
			default:
				c.Failed++
			}
			return err
		}
	}
}

// Snapshot is a copy of the counts, by topic.
func (m *Metrics) Snapshot() map[string]TopicCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]TopicCounts, len(m.counts))
	for t, c := range m.counts {
		out[t] = *c
	}
	return out
}

// String lists the counts by topic, for a log line.
func (m *Metrics) String() string {
	snap := m.Snapshot()
	topics := make([]string, 0, len(snap))
	for t := range snap {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	s := ""
	for _, t := range topics {
		c := snap[t]
		s += fmt.Sprintf("%s: done=%d failed=%d permanent=%d timed_out=%d; ", t, c.Done, c.Failed, c.Permanent, c.TimedOut)
	}
	return s
}

// DeadLetterPanics is a panic policy: the SDK recovers a handler's panic
// and retries the job like any failure; this middleware recovers it first
// and dead-letters the job at once (pulse.Permanent), on the view that a
// panic is a bug the same args will hit again. Put it innermost, so the
// middleware outside it sees the error.
func DeadLetterPanics(next pulse.Handler) pulse.Handler {
	return func(ctx context.Context, job *pulse.Job) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = pulse.Permanent(fmt.Errorf("panic: %v", v))
			}
		}()
		return next(ctx, job)
	}
}

// Per-tenant context: the producer's interceptor puts the tenant of the
// request's context into the job's args, and the worker's middleware puts
// it back into the handler's context, so handlers (and their loggers,
// database calls, quotas) know whose job they run.

type tenantKey struct{}

// WithTenant returns ctx carrying tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom returns the tenant ctx carries.
func TenantFrom(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tenantKey{}).(string)
	return t, ok && t != ""
}

// envelope is the args a tenant's job carries: the tenant, and the
// producer's own args.
type envelope struct {
	Tenant  string          `json:"tenant"`
	Payload json.RawMessage `json:"payload"`
}

// ErrNoTenant refuses an enqueue whose context names no tenant.
var ErrNoTenant = errors.New("enqueue without a tenant in the context")

// TenantInterceptor wraps each job's args in {"tenant": ..., "payload":
// args}, the tenant taken from the context; a context without a tenant is
// refused before anything is sent.
func TenantInterceptor(ctx context.Context, req *pulse.JobRequest, next pulse.EnqueueFunc) (pulse.Submitted, error) {
	tenant, ok := TenantFrom(ctx)
	if !ok {
		return pulse.Submitted{}, ErrNoTenant
	}
	payload, err := json.Marshal(req.Args)
	if raw, isRaw := req.Args.(json.RawMessage); isRaw {
		payload, err = raw, nil
	} else if b, isBytes := req.Args.([]byte); isBytes {
		payload, err = b, nil
	}
	if err != nil {
		return pulse.Submitted{}, fmt.Errorf("encode args: %w", err)
	}
	if len(payload) == 0 || string(payload) == "null" {
		payload = json.RawMessage(`{}`)
	}
	req.Args = envelope{Tenant: tenant, Payload: payload}
	return next(ctx, req)
}

// Tenant is the worker side: it unwraps the envelope, puts the tenant in
// the handler's context and hands the handler the producer's own args. A
// job without an envelope is dead-lettered: retrying cannot add one.
func Tenant(next pulse.Handler) pulse.Handler {
	return func(ctx context.Context, job *pulse.Job) error {
		var env envelope
		if err := json.Unmarshal(job.Args, &env); err != nil || env.Tenant == "" {
			return pulse.Permanent(fmt.Errorf("job %s has no tenant envelope", job.ID))
		}
		inner := *job
		inner.Args = env.Payload
		return next(WithTenant(ctx, env.Tenant), &inner)
	}
}
