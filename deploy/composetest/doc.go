// Package composetest runs docker-compose.yml for real (make compose-test):
// it builds every pulse image from deploy/docker/Dockerfile, starts the
// fleet with three gateway replicas and drives it from the host over
// 127.0.0.1 only: jobs over HTTP and gRPC, workers in containers through
// gateway-proxy and through DNS round-robin and one on the host, per-replica
// metrics from the compose Prometheus, pause and resume, a gateway killed
// and the tier scaled to one and back under load, and `down -v` leaving
// nothing behind.
//
// It is a module of its own, outside the go.work workspace, so `make test`
// (and any `go test` of the workspace) never runs it: it needs a Docker
// engine, builds images and takes minutes. scripts/compose-test.sh prepares
// the machine (engine, compose and buildx plugins, local base images where
// no registry is reachable) and runs it with GOWORK=off and
// PULSE_COMPOSE_TEST=1; the test skips without that variable.
//
// cmd/compose-worker is the worker its containers run (compose.test.yml).
package composetest
