// Package loadtest measures pulse end to end: real binaries, real Postgres,
// SDK producers and workers with no-op handlers. Results go to
// docs/benchmarks.md; run it with `make bench` or
// `go run ./loadtest/cmd/pulse-load -scenario all`.
package loadtest
