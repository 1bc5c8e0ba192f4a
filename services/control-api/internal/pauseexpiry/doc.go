// Package pauseexpiry resumes pauses whose expiry ("for" / "until") has
// passed, so a forgotten maintenance pause cannot stall production. It runs
// in every control-api replica: the resume is a guarded UPDATE (paused AND
// until <= now()), so however many replicas sweep, each expired pause is
// resumed and audited once, as the "system" actor.
package pauseexpiry
