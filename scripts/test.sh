#!/usr/bin/env bash
# The test command (make test): every module of the workspace but e2e,
# with the race detector, against real PostgreSQL clusters the tests start
# themselves (set PULSE_TEST_DATABASE_URL to use an existing server
# instead). `-short` leaves out the few tests that build every binary or
# open a thousand streams; make test-long (scripts/test-long.sh) runs them
# and the e2e module's fleets. ADR-0066.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/test-env.sh

mapfile -t pkgs < <(go list -m -f '{{.Dir}}/...')
echo "test: go vet"
go vet "${pkgs[@]}"
e2e="$PWD/e2e/..."
mapfile -t rest < <(printf '%s\n' "${pkgs[@]}" | grep -vxF "$e2e")
echo "test: go test -short (${#rest[@]} modules; make test-long runs e2e and the long tests)"
go test -count=1 -race -short -timeout 14m "$@" "${rest[@]}"
