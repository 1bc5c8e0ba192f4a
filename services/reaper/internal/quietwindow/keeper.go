package quietwindow

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/logging"
)

const (
	// Look is how often the keeper reads whether a vacuum is truncating
	// jobs: a vacuum keeps trying for its lock for 5 s.
	Look = 250 * time.Millisecond
	// LockTimeout is the longest the keeper waits for the transactions
	// in flight to let go of the gate. Every new lifecycle transaction
	// queues behind it while it waits, so it gives up rather than wait
	// out a long one: a claim or a report takes milliseconds.
	LockTimeout = 50 * time.Millisecond
	// Poll is how often a closed window looks whether the vacuum is done.
	Poll = 10 * time.Millisecond
	// Gap is the least time between the end of one window and the start
	// of the next. A vacuum that truncates a large end does it in steps
	// (it yields to the statements queued behind it once the gate opens,
	// and tries again for 5 s), and each step stalls the queue for the
	// window and the truncation: a queue at 70 % of its maximum needs
	// about twice a stall's length to catch up. With windows a second
	// apart, five steps in seven seconds left it 1.5 s behind in the soak
	// (docs/benchmarks.md); three seconds leave it the time, and still
	// come inside the vacuum's 5 s of tries.
	Gap = 3 * time.Second
)

// Store is what the keeper needs of jobstore.Store.
type Store interface {
	VacuumTruncating(ctx context.Context) (bool, error)
	QuietWindow(ctx context.Context, lockTimeout, hold, poll time.Duration) (jobstore.Window, error)
}

// Observer is told of every window, for metrics.
type Observer interface {
	QuietWindow(w jobstore.Window, err error)
}

// Keeper opens a quiet window when a vacuum of jobs asks for one.
type Keeper struct {
	hold    time.Duration
	store   Store
	obs     Observer
	logger  *slog.Logger
	lastEnd time.Time
}

// NewKeeper returns a Keeper whose windows last at most hold.
func NewKeeper(hold time.Duration, store Store, obs Observer, logger *slog.Logger) *Keeper {
	return &Keeper{hold: hold, store: store, obs: obs, logger: logger.With(logging.Loop, "quiet_window")}
}

// Tick looks once whether a vacuum of jobs is in its truncation phase
// and, unless the last window ended less than Gap ago, opens a window.
func (k *Keeper) Tick(ctx context.Context) error {
	if !k.lastEnd.IsZero() && time.Since(k.lastEnd) < Gap {
		return nil
	}
	truncating, err := k.store.VacuumTruncating(ctx)
	if err != nil || !truncating {
		return err
	}
	w, err := k.store.QuietWindow(ctx, LockTimeout, k.hold, Poll)
	k.lastEnd = time.Now()
	k.obs.QuietWindow(w, err)
	if err != nil {
		return fmt.Errorf("quiet window: %w", err)
	}
	// Info: a window holds every lifecycle transaction back for its
	// length, which an operator reading a latency spike wants to find.
	k.logger.InfoContext(ctx, "quiet window for a vacuum truncating jobs", "closed", w.Closed, "held", w.Held, "vacuum_done", w.VacuumDone)
	return nil
}
