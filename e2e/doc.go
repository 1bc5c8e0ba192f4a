// Package e2e holds the end-to-end tests: they build the real service
// binaries, run them as processes against a real throwaway Postgres (see
// deploy/localfleet), and drive them over the network the way producers,
// workers and operators do.
package e2e
