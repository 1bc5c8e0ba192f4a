// Package pause is the gateway's side of pause/resume (docs/pause.md,
// docs/adr/0007): the Gate, an in-memory copy of dispatch_control read on
// the hot path, and the Refresher that keeps it current — primed once at
// boot (fail-safe: a gateway that cannot read the state does not serve),
// then refreshed on every NOTIFY and every PULSE_PAUSE_REFRESH_INTERVAL
// (fail-open: a failed read keeps the last known state).
//
// The gate is an optimisation and a messenger, not the guard: the claim
// statement itself skips paused scopes, so a stale gate can never start a
// job of a paused scope. A globally paused gate keeps the dispatcher from
// issuing claim queries at all, and the gate's state is what workers are
// told on their streams and heartbeats.
package pause
