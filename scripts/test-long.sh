#!/usr/bin/env bash
# The long tier (make test-long): the e2e module — real fleets of the
# service binaries as processes, headless Chromium, a real Prometheus, the
# short chaos run — then every package holding a test that `-short` leaves
# out of make test, run whole without it (its other tests run twice; the
# set follows the code, so a new long test cannot fall between the two
# commands). ADR-0066.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/test-env.sh

echo "test-long: go test ./e2e/..."
go test -count=1 -race -timeout 14m "$@" ./e2e/...

# Packages with a test that skips under -short, found in the source.
mapfile -t dirs < <(git ls-files '*_test.go' | grep -v '^e2e/' | xargs -r grep -l 'testing.Short()' | xargs -r -n1 dirname | sort -u)
[ "${#dirs[@]}" -gt 0 ] || { echo "test-long: found no test that -short leaves out; scripts/test-long.sh looks for testing.Short()" >&2; exit 1; }
echo "test-long: go test, without -short: ${dirs[*]}"
go test -count=1 -race -timeout 14m "$@" "${dirs[@]/#/./}"
