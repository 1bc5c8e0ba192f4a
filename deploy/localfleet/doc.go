// Package localfleet runs the whole pulse system on one machine without
// Docker: a throwaway Postgres (pgcluster), the real service binaries built
// from this workspace, and optionally the demo producer and worker, all on
// free loopback ports. End-to-end tests, the load test and the pulse-dev
// command use it; nothing in production does.
package localfleet
