package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// Listener holds one connection LISTENing on the ready channel and wakes
// the dispatcher on every notification. Notifications are lossy (a dropped
// connection misses them), so after every reconnect it wakes the
// dispatcher once anyway, and the dispatcher's poll stays the reconciler.
type Listener struct {
	connect func(ctx context.Context) (*pgx.Conn, error)
	onReady func()
	logger  *slog.Logger
}

// NewListener builds a listener that opens its connection with connect.
func NewListener(connect func(ctx context.Context) (*pgx.Conn, error), onReady func(), logger *slog.Logger) *Listener {
	return &Listener{connect: connect, onReady: onReady, logger: logger.With("loop", "listener")}
}

// Run listens until ctx is done, reconnecting with backoff.
func (l *Listener) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		l.logger.Warn("listen connection lost; reconnecting", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *Listener) listen(ctx context.Context) error {
	conn, err := l.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+jobstore.ReadyChannel); err != nil {
		return err
	}
	l.onReady() // whatever was inserted while we were not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		l.onReady()
	}
}
