#!/usr/bin/env bash
# Prints the version pulse's modules require of each other (the one
# scripts/set-version.sh last wrote): pkg/server's requirement on pkg.
set -euo pipefail
cd "$(dirname "$0")/.."
v=$(GOWORK=off go mod edit -json pkg/server/go.mod |
  sed -n '/"Path": "github.com\/pulsequeue\/pulse\/pkg",/{n;s/.*"Version": "\(.*\)".*/\1/p;}')
[ -n "$v" ] || { echo "modversion: pkg/server/go.mod does not require github.com/pulsequeue/pulse/pkg" >&2; exit 1; }
echo "$v"
