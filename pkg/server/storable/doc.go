// Package storable checks, at the edge, what PostgreSQL would refuse to
// store: text with a NUL character or invalid UTF-8, JSON whose strings
// decode to NUL or hold a lone surrogate, numbers outside jsonb's numeric
// range, and timestamps outside the range pulse accepts. Batching points
// (coalesced submits, folded reports, the shared claim) call it before a
// value joins a batch, so one caller's bad value fails only that caller,
// with an error naming its field.
//
// A handler's error text is the one exception: it is data, repaired by
// package errtext in the SDK module, never refused.
package storable
