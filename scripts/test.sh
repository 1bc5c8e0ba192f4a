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

mapfile -t pkgs < <(go list -m -f '{{.Dir}}/...')
echo "test: go vet"
go vet "${pkgs[@]}"
echo "test: go test (${#pkgs[@]} modules)"
go test -count=1 -race -timeout 14m "$@" "${pkgs[@]}"
