package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The quiet window (ADR-0074). Postgres gives the jobs heap back only
// from its end, in a vacuum's last phase, and only while it holds the
// table's ACCESS EXCLUSIVE lock, which it never queues for: it tries every
// 50 ms for 5 s and gives up unless one try finds no other statement
// holding any lock on the table. A queue at full rate nearly always has
// a claim, a report or an insert in flight, so after an open snapshot
// bloated the table the tries fail and the heap keeps its size.
//
// The lifecycle's transactions on jobs — submits, claims, reports,
// heartbeats, the reaper's reap and retention — therefore begin by
// taking JobsGateKey shared, in the statement they already send first
// (pinnedPlanSQL, claimPlanSQL) or in one sent before theirs in the same
// round trip (gateSQL), before any lock on the table. Shared holders
// never wait for each other: with the gate open it costs one entry in the
// lock manager per transaction. When a vacuum of jobs is trying for its
// lock, the reaper takes the gate exclusively for a moment
// (Store.QuietWindow): the transactions in flight finish, new ones wait at
// the gate holding nothing of the table, and the vacuum's next try finds
// it free.

// JobsGateKey is the advisory lock of the quiet window. Applications
// sharing pulse's database must not use this advisory lock key.
const JobsGateKey = "483006378855" // PauseBarrierKey + 2

// gateSQL passes the gate, for a transaction whose first statement is not
// one of the plan statements that already do.
const gateSQL = `SELECT pg_advisory_xact_lock_shared(` + JobsGateKey + `)`

// vacuumTruncatingSQL reads whether a vacuum of jobs in this database is
// in its truncation phase: trying for the table's lock, or holding it and
// giving back the empty pages at the table's end. Postgres shows an
// autovacuum's progress only to a superuser or a member of
// pg_read_all_stats; to any other role relid reads NULL and the window
// never opens (QuietWindowVisible).
const vacuumTruncatingSQL = `
SELECT EXISTS (SELECT 1 FROM pg_stat_progress_vacuum
                WHERE datname = current_database() AND relid = 'jobs'::regclass
                  AND phase = 'truncating heap')`

// QuietWindowVisible reports whether this connection's role can see an
// autovacuum's progress, without which the quiet window never opens.
func (s *Store) QuietWindowVisible(ctx context.Context) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')`).Scan(&ok)
	return ok, interpretError("quiet window: privileges", err)
}

// VacuumTruncating reports whether a vacuum of jobs is in its truncation
// phase now (vacuumTruncatingSQL).
func (s *Store) VacuumTruncating(ctx context.Context) (bool, error) {
	var yes bool
	err := s.pool.QueryRow(ctx, vacuumTruncatingSQL).Scan(&yes)
	return yes, interpretError("quiet window: vacuum progress", err)
}

// Window is what one QuietWindow did.
type Window struct {
	// Closed is whether the gate was closed at all: false when the
	// transactions holding it did not all finish within the lock
	// timeout, in which case the window gave up and nothing waited
	// longer than that timeout.
	Closed bool
	// Held is how long the gate stayed closed.
	Held time.Duration
	// VacuumDone is whether the vacuum left its truncation phase while
	// the gate was closed (else the window ended at its bound).
	VacuumDone bool
}

// QuietWindow closes the gate — waiting at most lockTimeout for the
// transactions that hold it to finish, and giving up otherwise, since
// every new transaction queues behind it while it waits — then keeps it
// closed, looking every poll, until no vacuum of jobs is truncating or
// hold has passed, and opens it. The gate is a transaction-scoped lock:
// whatever ends the transaction (an error, a canceled context, a lost
// connection) opens it.
func (s *Store) QuietWindow(ctx context.Context, lockTimeout, hold, poll time.Duration) (Window, error) {
	var w Window
	if lockTimeout <= 0 || hold <= 0 || poll <= 0 {
		return w, fmt.Errorf("quiet window: lock timeout %s, hold %s and poll %s must be positive", lockTimeout, hold, poll)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, max(lockTimeout.Milliseconds(), 1))); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+JobsGateKey+`)`); err != nil {
			return err
		}
		w.Closed = true
		closed := time.Now()
		timer := time.NewTimer(poll)
		defer timer.Stop()
		for {
			// Inside a transaction Postgres keeps the first reading of
			// every backend's progress until told to read again.
			if _, err := tx.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
				return err
			}
			var truncating bool
			if err := tx.QueryRow(ctx, vacuumTruncatingSQL).Scan(&truncating); err != nil {
				return err
			}
			if !truncating {
				w.VacuumDone = true
				break
			}
			if time.Since(closed) >= hold {
				break
			}
			timer.Reset(min(poll, hold-time.Since(closed)))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		}
		w.Held = time.Since(closed)
		return nil
	})
	var pgErr *pgconn.PgError
	if !w.Closed && errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return w, nil // lock_not_available: the gate stayed open
	}
	return w, interpretError("quiet window", err)
}
