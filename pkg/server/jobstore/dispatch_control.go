package jobstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pause scopes, channels and actors shared by every service that reads or
// writes dispatch_control.
const (
	// GlobalScope is the dispatch_control scope that covers every topic.
	GlobalScope = "*"
	// DispatchControlChannel is the NOTIFY channel dispatch_control's
	// trigger sends on after every change (payload: the new version), so
	// gateways flip their gates at once instead of at the next poll.
	DispatchControlChannel = "pulse_dispatch_control"
	// SystemActor is recorded for changes no person made: the automatic
	// resume of an expired pause.
	SystemActor = "system"
)

// PauseMode says what a pause does to jobs already running.
type PauseMode string

// The pause modes (docs/pause.md).
const (
	// PauseDrain stops new claims; running jobs run to completion.
	PauseDrain PauseMode = "drain"
	// PauseQuiesce stops new claims and asks running jobs, through their
	// heartbeat answers, to hold at their next pulse.SafePoint.
	PauseQuiesce PauseMode = "quiesce"
)

// Valid reports whether m is a known mode.
func (m PauseMode) Valid() bool { return m == PauseDrain || m == PauseQuiesce }

// ScopeState is one row of dispatch_control.
type ScopeState struct {
	// Scope is GlobalScope or a topic.
	Scope  string
	Paused bool
	// Mode is the mode of the current (or, once resumed, the last) pause.
	Mode   PauseMode
	Reason string // empty unless paused
	// Actor made the latest change.
	Actor string
	// PausedAt is when the scope was last paused; a resume keeps it.
	PausedAt *time.Time
	// Until is when the pause ends by itself, if it was given an expiry.
	Until     *time.Time
	UpdatedAt time.Time
	// Version is the dispatch_control version of the row's latest change.
	Version int64
}

// DispatchState is the whole of dispatch_control at one moment.
type DispatchState struct {
	// Scopes holds the global scope first, then topic scopes by name.
	Scopes []ScopeState
	// Version is the newest change's version: it grows with every pause
	// and resume, and two reads with the same version saw the same state.
	Version int64
	// ReadAt is the database's clock at the read, so the age of a change
	// can be measured on one clock.
	ReadAt time.Time
}

// Scope returns the state of scope; a topic never paused has no row and
// reads as dispatching.
func (d DispatchState) Scope(scope string) ScopeState {
	for _, s := range d.Scopes {
		if s.Scope == scope {
			return s
		}
	}
	return ScopeState{Scope: scope, Mode: PauseDrain}
}

// Blocking returns the paused scope that keeps topic from being dispatched:
// the global scope when it is paused, else the topic's own.
func (d DispatchState) Blocking(topic string) (ScopeState, bool) {
	if g := d.Scope(GlobalScope); g.Paused {
		return g, true
	}
	if t := d.Scope(topic); t.Paused {
		return t, true
	}
	return ScopeState{}, false
}

// PauseRequest asks for a scope to be paused.
type PauseRequest struct {
	Scope  string
	Mode   PauseMode
	Reason string
	Actor  string
	// Until, when set, resumes the scope automatically at that time.
	Until *time.Time
}

// PauseResult is the scope's state after a Pause or Resume. Changed is
// false when the call asked for the state the scope already had: nothing
// was written, no version was drawn, no event was recorded.
type PauseResult struct {
	State   ScopeState
	Changed bool
}

// ControlAction is what a control event did.
type ControlAction string

// The control actions recorded in control_events.
const (
	ActionPause  ControlAction = "pause"
	ActionResume ControlAction = "resume"
)

// ControlEvent is one row of the control_events audit log, and the read
// side's model of it (ADR-0014).
type ControlEvent struct {
	ID     int64         `bun:"id,pk"`
	Scope  string        `bun:"scope"`
	Action ControlAction `bun:"action"`
	// Mode is the mode paused with, or the mode a resume lifted.
	Mode   PauseMode `bun:"mode"`
	Reason string    `bun:"reason"`
	Actor  string    `bun:"actor"`
	At     time.Time `bun:"at"`
	// Until is a pause's expiry, or the expiry that ended an automatic
	// resume.
	Until   *time.Time `bun:"until"`
	Version int64      `bun:"version"`
}

// ExpiredPauseReason is the reason recorded on an automatic resume.
const ExpiredPauseReason = "pause expired"

const scopeColumns = `scope, paused, mode, reason, actor, paused_at, until, updated_at, version`

// dispatchStateSQL reads every scope; the table holds one row per scope
// ever paused, so this is a handful of rows.
const dispatchStateSQL = `
SELECT ` + scopeColumns + `, clock_timestamp()
FROM dispatch_control
ORDER BY scope = '` + GlobalScope + `' DESC, scope`

// lockControlSQL serialises every change to dispatch_control on the global
// row, so versions are drawn in commit order and an idempotency check
// cannot race the write it guards. Claims only read the table, so they
// never wait on it; they wait only on a Pause's barrier (pauseBarrierSQL).
const lockControlSQL = `SELECT 1 FROM dispatch_control WHERE scope = '` + GlobalScope + `' FOR UPDATE`

// PauseBarrierKey is the advisory lock that orders claims against pause
// changes (claimPlanSQL): claims hold it shared until they commit, and
// every change to dispatch_control takes it exclusively before writing. It
// is one key for every scope: a topic pause waits out the claims in flight
// on every topic, which is a few milliseconds, and keeps the claim's side
// to a single lock whatever the number of topics it serves. Applications
// sharing pulse's database must not use this advisory lock key.
const PauseBarrierKey = "483006378853" // 0x70756c7365, "pulse"

// pauseBarrierSQL waits for every claim in flight to commit and holds new
// claims back until this transaction commits.
const pauseBarrierSQL = `SELECT pg_advisory_xact_lock(` + PauseBarrierKey + `)`

// pauseSQL pauses a scope (creating a topic's row on its first pause) and
// records the event in the same statement. paused_at moves only when the
// scope was not already paused: changing the mode or reason of a pause
// keeps its start. The row trigger stamps version and updated_at, and the
// statement trigger NOTIFYs the gateways on commit.
const pauseSQL = `
WITH changed AS (
    INSERT INTO dispatch_control AS dc (scope, paused, mode, reason, actor, paused_at, until)
    VALUES ($1, true, $2, $3, $4, now(), $5)
    ON CONFLICT (scope) DO UPDATE
    SET paused    = true,
        mode      = EXCLUDED.mode,
        reason    = EXCLUDED.reason,
        actor     = EXCLUDED.actor,
        until     = EXCLUDED.until,
        paused_at = CASE WHEN dc.paused THEN dc.paused_at ELSE now() END
    RETURNING ` + scopeColumns + `
), audited AS (
    INSERT INTO control_events (scope, action, mode, reason, actor, until, version)
    SELECT scope, 'pause', mode, reason, actor, until, version FROM changed
)
SELECT ` + scopeColumns + ` FROM changed`

// resumeSQL resumes a paused scope: the reason and expiry go, paused_at
// stays, so the scope shows when its last pause began. A scope that is not
// paused matches nothing.
const resumeSQL = `
WITH changed AS (
    UPDATE dispatch_control
    SET paused = false, reason = '', until = NULL, actor = $2
    WHERE scope = $1 AND paused
    RETURNING ` + scopeColumns + `
), audited AS (
    INSERT INTO control_events (scope, action, mode, reason, actor, version)
    SELECT scope, 'resume', mode, '', actor, version FROM changed
)
SELECT ` + scopeColumns + ` FROM changed`

// anyExpiredSQL is the sweeper's cheap check, run without the lock.
const anyExpiredSQL = `SELECT EXISTS (SELECT 1 FROM dispatch_control WHERE paused AND until <= now())`

// resumeExpiredSQL resumes every pause whose expiry has passed, audited as
// the system's. The guard (paused AND until <= now()) makes it idempotent:
// any number of control-api replicas may sweep, and each expired pause is
// resumed, and recorded, once.
const resumeExpiredSQL = `
WITH expired AS (
    SELECT scope, until FROM dispatch_control WHERE paused AND until <= now()
), changed AS (
    UPDATE dispatch_control AS dc
    SET paused = false, reason = '', until = NULL, actor = '` + SystemActor + `'
    FROM expired
    WHERE dc.scope = expired.scope AND dc.paused AND dc.until <= now()
    RETURNING dc.scope, dc.paused, dc.mode, dc.reason, dc.actor, dc.paused_at, dc.until,
              dc.updated_at, dc.version, expired.until AS expired_at
), audited AS (
    INSERT INTO control_events (scope, action, mode, reason, actor, until, version)
    SELECT scope, 'resume', mode, '` + ExpiredPauseReason + `', actor, expired_at, version FROM changed
)
SELECT ` + scopeColumns + ` FROM changed ORDER BY scope`

// DispatchState reads every scope.
func (s *Store) DispatchState(ctx context.Context) (DispatchState, error) {
	rows, err := s.pool.Query(ctx, dispatchStateSQL)
	if err != nil {
		return DispatchState{}, interpretError("read dispatch state", err)
	}
	defer rows.Close()
	var st DispatchState
	for rows.Next() {
		var sc ScopeState
		var mode string
		if err := rows.Scan(&sc.Scope, &sc.Paused, &mode, &sc.Reason, &sc.Actor, &sc.PausedAt, &sc.Until,
			&sc.UpdatedAt, &sc.Version, &st.ReadAt); err != nil {
			return DispatchState{}, interpretError("read dispatch state", err)
		}
		sc.Mode = PauseMode(mode)
		st.Scopes = append(st.Scopes, sc)
		st.Version = max(st.Version, sc.Version)
	}
	if err := rows.Err(); err != nil {
		return DispatchState{}, interpretError("read dispatch state", err)
	}
	if len(st.Scopes) == 0 || st.Scopes[0].Scope != GlobalScope {
		return DispatchState{}, errors.New("read dispatch state: the global scope row is missing from dispatch_control")
	}
	return st, nil
}

// Pause pauses req.Scope. Asking again for the pause the scope already has
// (same mode, reason and expiry) changes nothing and records nothing;
// changing any of them updates the pause, draws a new version and is
// recorded.
func (s *Store) Pause(ctx context.Context, req PauseRequest) (PauseResult, error) {
	if req.Until != nil {
		u := req.Until.Truncate(time.Microsecond) // what timestamptz keeps
		req.Until = &u
	}
	var res PauseResult
	err := s.controlTx(ctx, "pause dispatch", func(tx pgx.Tx) error {
		cur, found, err := scopeInTx(ctx, tx, req.Scope)
		if err != nil {
			return err
		}
		if found && cur.Paused && cur.Mode == req.Mode && cur.Reason == req.Reason && sameTime(cur.Until, req.Until) {
			res = PauseResult{State: cur}
			return nil
		}
		// Wait out the claims in flight and hold back new ones until this
		// commits: once Pause returns, no claim of the scope can commit.
		if _, err := tx.Exec(ctx, pauseBarrierSQL); err != nil {
			return err
		}
		st, err := scanScope(tx.QueryRow(ctx, pauseSQL, req.Scope, string(req.Mode), req.Reason, req.Actor, req.Until))
		if err != nil {
			return err
		}
		res = PauseResult{State: st, Changed: true}
		return nil
	})
	return res, err
}

// Resume resumes scope. Resuming a scope that is not paused (or a topic
// never paused) changes nothing and records nothing.
func (s *Store) Resume(ctx context.Context, scope, actor string) (PauseResult, error) {
	var res PauseResult
	err := s.controlTx(ctx, "resume dispatch", func(tx pgx.Tx) error {
		st, err := scanScope(tx.QueryRow(ctx, resumeSQL, scope, actor))
		if err == nil {
			res = PauseResult{State: st, Changed: true}
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		cur, found, err := scopeInTx(ctx, tx, scope)
		if err != nil {
			return err
		}
		if !found {
			cur = ScopeState{Scope: scope, Mode: PauseDrain}
		}
		res = PauseResult{State: cur}
		return nil
	})
	return res, err
}

// ResumeExpired resumes every pause whose expiry has passed and returns
// the scopes it resumed. It costs one indexed read when nothing expired.
func (s *Store) ResumeExpired(ctx context.Context) ([]ScopeState, error) {
	var expired bool
	if err := s.pool.QueryRow(ctx, anyExpiredSQL).Scan(&expired); err != nil {
		return nil, interpretError("resume expired pauses", err)
	}
	if !expired {
		return nil, nil
	}
	var out []ScopeState
	err := s.controlTx(ctx, "resume expired pauses", func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, resumeExpiredSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			st, err := scanScope(rows)
			if err != nil {
				return err
			}
			out = append(out, st)
		}
		return rows.Err()
	})
	return out, err
}

// ListControlEvents returns up to limit events older than before (0: from
// the newest), newest first, walking the primary key backwards.
func (s *Store) ListControlEvents(ctx context.Context, before int64, limit int) ([]ControlEvent, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []ControlEvent
	q := s.reads().NewSelect().Model(&out)
	if before != 0 {
		q = q.Where("id < ?", before)
	}
	if err := q.OrderExpr("id DESC").Limit(int64(limit)).Scan(ctx); err != nil {
		return nil, readError("list control events", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// controlTx runs fn in a transaction holding the dispatch_control lock.
func (s *Store) controlTx(ctx context.Context, op string, fn func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockControlSQL); err != nil {
			return err
		}
		return fn(tx)
	})
	return interpretError(op, err)
}

func scopeInTx(ctx context.Context, tx pgx.Tx, scope string) (ScopeState, bool, error) {
	st, err := scanScope(tx.QueryRow(ctx, `SELECT `+scopeColumns+` FROM dispatch_control WHERE scope = $1`, scope))
	if errors.Is(err, pgx.ErrNoRows) {
		return ScopeState{}, false, nil
	}
	return st, err == nil, err
}

func scanScope(row rowScanner) (ScopeState, error) {
	var sc ScopeState
	var mode string
	err := row.Scan(&sc.Scope, &sc.Paused, &mode, &sc.Reason, &sc.Actor, &sc.PausedAt, &sc.Until, &sc.UpdatedAt, &sc.Version)
	sc.Mode = PauseMode(mode)
	return sc, err
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}
