#!/usr/bin/env bash
# make check-outside: use pulse as a stranger would, from outside the
# repository, at the version its modules require of each other
# (scripts/modversion.sh), before that version is tagged.
#
#  1. tools/modproxy serves every module of the working tree at that
#     version as a file-based module proxy.
#  2. Outside the workspace (GOWORK=off) with a fresh module cache: a new
#     module `go get`s the SDK alone and builds a producer + worker
#     (scripts/outside/worker) — its module graph must hold no server
#     module — then `go get`s pkg/pulsetx and builds a transactional
#     enqueue (scripts/outside/txenqueue).
#  3. `go install`s the CLI and each service at that version — as a user
#     runs it, without -mod=mod, so a go.mod that is not tidy fails here —
#     and checks that each binary's --version prints the version.
#
# Pulse's modules come only from the file proxy (its own; GONOSUMDB for
# github.com/pulsequeue/* since the checksum database cannot know an
# untagged version); third-party modules from the machine's module cache
# (its download directory is itself a file proxy) or else the real proxy,
# so the fresh cache costs a copy, not the network. -trimpath lets the
# build cache serve packages compiled from another module cache.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

version=${VERSION:-$(scripts/modversion.sh)}
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
start=$SECONDS
step() { echo "check-outside: $* ($((SECONDS - start))s)"; }
fail() { echo "check-outside: FAIL: $*" >&2; exit 1; }

step "serving the working tree's modules at $version"
(cd tools && GOWORK=off go run ./modproxy -root .. -version "$version" -out "$tmp/proxy")

hostproxy=$(go env GOPROXY)
hostcache=$(go env GOMODCACHE)
export GOWORK=off
export GOMODCACHE="$tmp/modcache"
export GOPROXY="file://$tmp/proxy,file://$hostcache/cache/download,$hostproxy"
export GONOSUMDB="github.com/pulsequeue/*"
export GOFLAGS="-mod=mod -trimpath"
export GOBIN="$tmp/bin"
unset GOPRIVATE GONOPROXY

prefix=github.com/pulsequeue/pulse
mkdir -p "$tmp/app"
cd "$tmp/app"
go mod init example.com/app >/dev/null 2>&1

step "go get $prefix/pkg@$version (the SDK alone)"
go get "$prefix/pkg@$version"
cp -r "$repo/scripts/outside/worker" .
go build -o /dev/null ./worker
go vet ./worker
if server=$(go list -m all | grep -E "^$prefix/(pkg/server|migrations|services/)"); then
  fail "the SDK alone brings server modules into an application's module graph: $server"
fi

step "go get $prefix/pkg/pulsetx@$version"
go get "$prefix/pkg/pulsetx@$version"
cp -r "$repo/scripts/outside/txenqueue" .
go build -o /dev/null ./txenqueue
go vet ./txenqueue
grep -q "^require.*$prefix/pkg/pulsetx $version\|^	$prefix/pkg/pulsetx $version" go.mod ||
  fail "go.mod does not require $prefix/pkg/pulsetx $version: $(cat go.mod)"

cd "$tmp"
for cmd in cli/cmd/pulse services/control-api services/dispatch-gateway services/reaper services/scheduler; do
  bin=$(basename "$cmd")
  step "go install $prefix/$cmd@$version"
  GOFLAGS=-trimpath go install "$prefix/$cmd@$version"
  [ -x "$GOBIN/$bin" ] || fail "go install $prefix/$cmd@$version installed no $bin in GOBIN"
  got=$("$GOBIN/$bin" --version) || fail "$bin --version failed: $got"
  [ "$got" = "$bin $version" ] || fail "$bin --version printed '$got', want '$bin $version'"
done
step "ok: the SDK, pkg/pulsetx, the CLI and every service at $version, from outside"
