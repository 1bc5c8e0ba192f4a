// Package loop runs a service's periodic work — pause expiry, queue depth,
// lease sweep, retention — the one way: run, wait the interval (less a
// little jitter, so replicas started together drift apart), run again; after
// a failure wait longer (backoff.Policy from one interval up to
// Config.MaxBackoff), logging and counting each failure in
// pulse_loop_errors_total{loop}; Stop ends it, abandoning a run in flight
// through its context.
package loop

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsequeue/pulse/pkg/server/backoff"
	"github.com/pulsequeue/pulse/pkg/server/internal/background"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// DefaultJitter is the fraction of an interval a wait may be shortened by:
// enough to spread replicas, too little to matter to a reader of the
// interval.
const DefaultJitter = 0.1

// Config describes one loop.
type Config struct {
	// Name is the loop's name in logs (loop=<name>) and in
	// pulse_loop_errors_total{loop}. Fixed, low-cardinality.
	Name string
	// Interval is the wait between runs after a success.
	Interval time.Duration
	// Jitter, 0 to 1, is the largest fraction of each wait taken off at
	// random; 0 waits exactly (DefaultJitter is what services use).
	Jitter float64
	// Immediate runs once at Start instead of after the first interval.
	Immediate bool
	// MaxBackoff caps the wait after consecutive failures, which doubles
	// from one Interval; 0 means 4 × Interval. A single failure waits one
	// interval, as a ticker would.
	MaxBackoff time.Duration
	// Logger gets one line per failure; nil discards.
	Logger *slog.Logger
	// Metrics counts failures; nil counts none.
	Metrics *Metrics
}

// Metrics is pulse_loop_errors_total{loop}, shared by a process's loops.
type Metrics struct {
	errors *prometheus.CounterVec
}

// NewMetrics registers pulse_loop_errors_total on reg, or reuses the one
// already there.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulse_loop_errors_total",
		Help: "Failed runs of a periodic loop (pause_expiry, queue_depth, lease_sweeper, job_cleaner); the loop backs off and retries.",
	}, []string{"loop"})
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
		c = are.ExistingCollector.(*prometheus.CounterVec)
	}
	return &Metrics{errors: c}
}

// Errors is the failure counter of the named loop.
func (m *Metrics) Errors(name string) prometheus.Counter { return m.errors.WithLabelValues(name) }

// Loop runs fn periodically between Start and Stop (or Run until its
// context ends).
type Loop struct {
	cfg    Config
	fn     func(ctx context.Context) error
	logger *slog.Logger
	errs   prometheus.Counter
	bg     background.Runner
}

// New builds a loop running fn. fn gets a context that ends at Stop; an
// error it returns is a failed run. An error returned after the context
// ended is the stop, not a failure.
func New(cfg Config, fn func(ctx context.Context) error) *Loop {
	if cfg.Interval <= 0 {
		panic("loop: " + cfg.Name + ": non-positive interval")
	}
	if cfg.MaxBackoff < cfg.Interval {
		cfg.MaxBackoff = 4 * cfg.Interval
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Loop{cfg: cfg, fn: fn, logger: logger.With(logging.Loop, cfg.Name)}
	if cfg.Metrics != nil {
		l.errs = cfg.Metrics.Errors(cfg.Name)
		l.errs.Add(0) // exported from the start, so rate() has a series
	}
	return l
}

// Name is the loop's name.
func (l *Loop) Name() string { return l.cfg.Name }

// Start runs the loop in its own goroutine until Stop; ctx is only the
// start's (its values are kept, its end is not).
func (l *Loop) Start(ctx context.Context) error {
	l.bg.Start(ctx, l.Run)
	return nil
}

// Stop ends the loop and waits for it, or for ctx; a run in flight sees
// its context end.
func (l *Loop) Stop(ctx context.Context) error { return l.bg.Stop(ctx) }

// Run runs the loop until ctx is done.
func (l *Loop) Run(ctx context.Context) {
	fails := backoff.New(backoff.Policy{Initial: l.cfg.Interval, Max: l.cfg.MaxBackoff, Jitter: l.cfg.Jitter})
	steady := backoff.Policy{Initial: l.cfg.Interval, Max: l.cfg.Interval, Jitter: l.cfg.Jitter}
	wait := steady.Delay(1)
	if l.cfg.Immediate {
		wait = 0
	}
	for {
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
		err := l.fn(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			fails.Reset()
			wait = steady.Delay(1)
			continue
		}
		wait = fails.Next()
		if l.errs != nil {
			l.errs.Inc()
		}
		l.logger.Error("loop run failed; retrying", logging.Error, err,
			"failures", fails.Failures(), "retry_in", wait)
	}
}
