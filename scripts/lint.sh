#!/usr/bin/env bash
# make lint's golangci-lint step: golangci-lint v2 (the version tools/go.mod
# pins as a tool; never a product module's dependency) over every module
# of the workspace, configured by .golangci.yaml. The binary is built once
# per tools/go.sum into the user cache and golangci-lint keeps its own
# analysis cache, so a second run re-checks only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${XDG_CACHE_HOME:-$HOME/.cache}/pulse
sum=$(sha256sum tools/go.sum | cut -c1-16)
bin=$cache/golangci-lint-$sum
if [ ! -x "$bin" ]; then
  mkdir -p "$cache"
  echo "lint: building golangci-lint from tools/go.mod into $bin"
  GOWORK=off go build -C tools -o "$bin.tmp" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
  mv "$bin.tmp" "$bin"
fi
mapfile -t pkgs < <(go list -m -f '{{.Dir}}/...' | sed "s|^$PWD/|./|")
"$bin" run "$@" "${pkgs[@]}"
