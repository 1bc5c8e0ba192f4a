// Package pglisten is a process's one LISTEN connection: every channel the
// process cares about (the gateway's pulse_jobs_ready and
// pulse_dispatch_control, the scheduler's pulse_schedules_changed) shares
// it. The connection is its own, outside the pool, so waiting for a
// notification never holds a pooled connection. A lost connection is
// reopened with backoff; after every (re)connect, once LISTEN holds again,
// each channel's Resync runs, because NOTIFY is lossy: what was sent while
// nobody listened is gone, and the subscriber reconciles by reading the
// state (a claim pass, a pause-state read, a schedule pass).
package pglisten

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/server/backoff"
	"github.com/pulsequeue/pulse/pkg/server/internal/background"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// Reconnect is the wait between attempts to reopen a lost connection.
var Reconnect = backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// Handler is what one channel's subscriber is told. Both run on the
// listener's goroutine and must not block: signal a loop, do not query.
type Handler struct {
	// Notify is called for every notification on the channel, with its
	// payload. Nil ignores them (Resync alone may be enough).
	Notify func(payload string)
	// Resync is called after every connect once LISTEN holds, the first
	// one included: notifications sent meanwhile were lost.
	Resync func()
}

// Connect opens the listener's connection.
type Connect func(ctx context.Context) (*pgx.Conn, error)

// FromPool opens connections configured as pool's are (URL,
// application_name, tracer), outside the pool.
func FromPool(pool *pgxpool.Pool) Connect {
	return func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	}
}

// Listener multiplexes channels over one connection.
type Listener struct {
	connect Connect
	logger  *slog.Logger

	mu       sync.Mutex
	handlers map[string][]Handler
	order    []string
	started  bool
	bg       background.Runner
}

// New returns a listener that opens its connection with connect.
func New(connect Connect, logger *slog.Logger) *Listener {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Listener{connect: connect, logger: logger.With(logging.Loop, "listener"), handlers: map[string][]Handler{}}
}

// Handle subscribes h to channel; call it before Start. Several handlers
// may share a channel.
func (l *Listener) Handle(channel string, h Handler) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		panic("pglisten: Handle after Start")
	}
	if _, ok := l.handlers[channel]; !ok {
		l.order = append(l.order, channel)
	}
	l.handlers[channel] = append(l.handlers[channel], h)
}

// Channels lists the channels subscribed to, in the order first handled.
func (l *Listener) Channels() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.order...)
}

// Start listens in the background until Stop. With no channel subscribed
// it does nothing.
func (l *Listener) Start(ctx context.Context) error {
	if l.start() {
		l.bg.Start(ctx, l.run)
	}
	return nil
}

// Stop closes the connection and waits for the listener, or for ctx.
func (l *Listener) Stop(ctx context.Context) error { return l.bg.Stop(ctx) }

// Run listens until ctx is done, reconnecting with backoff; it is what
// Start runs, for callers that own the goroutine.
func (l *Listener) Run(ctx context.Context) {
	l.start()
	l.run(ctx)
}

// start closes the subscriptions and reports whether there is anything to
// listen for.
func (l *Listener) start() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = true
	return len(l.order) > 0
}

func (l *Listener) run(ctx context.Context) {
	b := backoff.New(Reconnect)
	for {
		err := l.listen(ctx, b.Reset)
		if ctx.Err() != nil {
			return
		}
		wait := b.Next()
		l.logger.Warn("listen connection lost; reconnecting (polls cover meanwhile)",
			logging.Error, err, "channels", l.order, "retry_in", wait)
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// listen holds one connection: LISTEN on every channel, resync, then
// dispatch notifications until the connection or ctx ends. connected is
// called once LISTEN holds.
func (l *Listener) listen(ctx context.Context, connected func()) error {
	conn, err := l.connect(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for _, ch := range l.order {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	connected()
	for _, ch := range l.order {
		for _, h := range l.handlers[ch] {
			if h.Resync != nil {
				h.Resync()
			}
		}
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, h := range l.handlers[n.Channel] {
			if h.Notify != nil {
				h.Notify(n.Payload)
			}
		}
	}
}
