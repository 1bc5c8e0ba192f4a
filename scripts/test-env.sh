# Sourced by scripts/test.sh and scripts/test-long.sh: what every test run
# needs before go test starts.

command -v go >/dev/null 2>&1 || { echo "test: Go is not on PATH (need Go >= 1.26.7)" >&2; exit 1; }
if [ -z "${PULSE_TEST_DATABASE_URL:-}" ]; then
  scripts/ensure-postgres.sh
fi
scripts/ensure-tools.sh
# make dev's fleet runs the Python SDK's demo worker beside the Go one, and
# TestPulseDev requires it: Debian's python3-grpcio and python3-protobuf.
sdk/python/scripts/ensure-deps.sh >/dev/null

# A binary built with -race sleeps one second at exit by default, waiting
# for reports from other threads; over a hundred test binaries that is a
# minute and a half of the run. A race is reported by the thread that hits
# it, and the testing package fails the test that raced before it exits, so
# nothing is lost without the wait. A GORACE the caller set still wins.
export GORACE="atexit_sleep_ms=0${GORACE:+ $GORACE}"
