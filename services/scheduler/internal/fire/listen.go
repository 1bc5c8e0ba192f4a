package fire

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

// Listen holds one pool connection LISTENing on pulse_schedules_changed
// and calls wake for every notification, until ctx is done. A lost
// connection is retried after a second; meanwhile the loop's reconcile
// cap keeps changes noticed within a second anyway.
func Listen(ctx context.Context, pool *pgxpool.Pool, wake func(), logger *slog.Logger) {
	for ctx.Err() == nil {
		if err := listenOnce(ctx, pool, wake); err != nil && ctx.Err() == nil {
			logger.Warn("schedule change listener lost; retrying", logging.Error, err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func listenOnce(ctx context.Context, pool *pgxpool.Pool, wake func()) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+jobstore.SchedulesChannel); err != nil {
		return err
	}
	defer func() {
		// The connection goes back to the pool: stop listening first.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN *")
	}()
	wake() // changes made before LISTEN took hold
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}
