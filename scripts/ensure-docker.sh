#!/usr/bin/env bash
# Makes sure this machine can run `docker compose` with BuildKit builds:
#
#   1. a Docker engine: Debian's docker.io package when dockerd is missing;
#   2. a running daemon: started in the background when `docker info`
#      fails (log: $PULSE_CACHE/dockerd.log);
#   3. the compose v2 and buildx CLI plugins, when `docker compose version`
#      or `docker buildx version` fails: built from source fetched as Go
#      modules (`go install` refuses both: their go.mod has replace and
#      exclude directives), cached as $PULSE_CACHE/bin/docker-*-<version>
#      and installed into ~/.docker/cli-plugins/.
#
# Idempotent: a second run with everything in place takes a second. Set
# PULSE_CACHE to move the cache (default ~/.cache/pulse).
set -euo pipefail

COMPOSE_VERSION=${PULSE_COMPOSE_VERSION:-v2.40.3}
BUILDX_VERSION=${PULSE_BUILDX_VERSION:-v0.38.2}
CACHE=${PULSE_CACHE:-$HOME/.cache/pulse}
PLUGINS=$HOME/.docker/cli-plugins
log() { echo "ensure-docker: $*" >&2; }
die() { log "$*"; exit 1; }

mkdir -p "$CACHE/bin" "$PLUGINS"

# 1. The engine.
if ! command -v dockerd >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 ||
    die "no Docker engine (dockerd) and no way to install one here; install Docker first"
  log "installing Debian's docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends docker.io iptables ca-certificates >/dev/null 2>&1 ||
    die "apt-get install docker.io failed"
fi
command -v docker >/dev/null 2>&1 || die "no docker CLI on PATH"

# 2. The daemon.
if ! docker info >/dev/null 2>&1; then
  if [ -S /var/run/docker.sock ] && pgrep -x dockerd >/dev/null 2>&1; then
    log "dockerd is running but not answering yet"
  else
    [ "$(id -u)" = 0 ] || die "the Docker daemon is not running and only root can start it here"
    log "starting dockerd (log: $CACHE/dockerd.log)"
    # setsid: the daemon outlives this script and the make that ran it.
    setsid dockerd >>"$CACHE/dockerd.log" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { tail -n 30 "$CACHE/dockerd.log" >&2 || true; die "dockerd did not come up within 60s"; }
fi

# 3. The plugins. build_plugin NAME MODULE VERSION PACKAGE LDFLAGS: the
# version is linked in as the projects' own builds do (compose checks the
# buildx version before delegating builds to it).
build_plugin() {
  local name=$1 module=$2 version=$3 pkg=$4 ldflags=$5
  local cached="$CACHE/bin/docker-$name-$version"
  if [ ! -x "$cached" ]; then
    command -v go >/dev/null 2>&1 || die "building docker-$name needs Go on PATH"
    log "building docker-$name $version from $module (a few minutes, once; cached in $cached)"
    local started=$SECONDS dir src work
    dir=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$dir" ] && [ -d "$dir" ] || die "go mod download $module@$version failed"
    work=$(mktemp -d)
    src="$work/src"
    cp -r "$dir" "$src"
    chmod -R u+w "$src"
    (cd "$src" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$cached.tmp" "$pkg") \
      >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; rm -rf "$work"; die "building docker-$name failed"; }
    rm -rf "$work"
    mv "$cached.tmp" "$cached"
    log "built docker-$name in $((SECONDS - started))s"
  fi
  install -m 0755 "$cached" "$PLUGINS/docker-$name"
}

if ! docker compose version >/dev/null 2>&1; then
  build_plugin compose github.com/docker/compose/v2 "$COMPOSE_VERSION" ./cmd \
    "-X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION"
fi
if ! docker buildx version >/dev/null 2>&1; then
  build_plugin buildx github.com/docker/buildx "$BUILDX_VERSION" ./cmd/buildx \
    "-X github.com/docker/buildx/version.Version=$BUILDX_VERSION -X github.com/docker/buildx/version.Package=github.com/docker/buildx"
fi
docker compose version >/dev/null 2>&1 || die "docker compose does not run"
docker buildx version >/dev/null 2>&1 || die "docker buildx does not run"
log "ready: engine $(docker version --format '{{.Server.Version}}'), $(docker compose version --short 2>/dev/null | sed 's/^/compose /'), $(docker buildx version | awk '{print "buildx " $2}')"
