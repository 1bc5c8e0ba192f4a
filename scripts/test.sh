#!/usr/bin/env bash
# The one test command (make test): every module of the workspace, against
# real PostgreSQL clusters the tests start themselves. Set
# PULSE_TEST_DATABASE_URL to use an existing server instead.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null 2>&1 || { echo "test: Go is not on PATH (need Go >= 1.26.7)" >&2; exit 1; }
if [ -z "${PULSE_TEST_DATABASE_URL:-}" ]; then
  scripts/ensure-postgres.sh
fi
scripts/ensure-tools.sh
# make dev's fleet runs the Python SDK's demo worker beside the Go one, and
# TestPulseDev requires it: Debian's python3-grpcio and python3-protobuf.
sdk/python/scripts/ensure-deps.sh >/dev/null

mapfile -t pkgs < <(go list -m -f '{{.Dir}}/...')
echo "test: go vet"
go vet "${pkgs[@]}"
# The end-to-end module (real fleets, headless Chromium, Prometheus) runs
# after the others rather than beside them: on two cores, a browser and a
# fleet next to fourteen other test binaries starved both sides into
# timeouts (a page read before its refresh finished, a claim retried past
# a test's bound), which no test should have to allow for.
e2e="$PWD/e2e/..."
mapfile -t rest < <(printf '%s\n' "${pkgs[@]}" | grep -vxF "$e2e")
echo "test: go test (${#rest[@]} modules, then e2e)"
go test -count=1 -race -timeout 14m "$@" "${rest[@]}"
go test -count=1 -race -timeout 14m "$@" "$e2e"
