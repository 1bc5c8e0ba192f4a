#!/usr/bin/env bash
# Builds local stand-ins for every base image the compose fleet needs, from
# Debian packages and the Go module proxy alone, for machines that cannot
# pull from an image registry:
#
#   pulse-local/golang:1.26.8-bookworm     Go builder (the Dockerfile's GO_IMAGE)
#   pulse-local/static:nonroot             distroless-like runtime: no shell, nonroot (65532),
#                                          CA bundle, zoneinfo (the Dockerfile's RUNTIME_IMAGE)
#   pulse-local/postgres:15                Debian's PostgreSQL 15, honouring POSTGRES_USER/PASSWORD/DB
#   pulse-local/prometheus:2.42            Debian's Prometheus
#   pulse-local/haproxy:2.6                Debian's HAProxy (gateway-proxy)
#   pulse-local/python:bookworm            Debian's python3 with python3-grpcio and python3-protobuf
#                                          (the Dockerfile's PYTHON_IMAGE, the Python SDK's demo)
#   pulse-local/jaeger:1.76.0              Jaeger (v1.76.0 = v2.13.0) all-in-one, in memory, built
#                                          from its Go module (cmd/jaeger) on the static runtime
#
# and prints the variables that point docker-compose.yml at them:
#
#   eval "$(scripts/local-images.sh)"
#   docker compose up --build
#
# Grafana has no Debian package and no stand-in: the printed COMPOSE_FILE
# adds deploy/docker/compose.local-images.yml, which leaves it out, so
# `docker compose up` runs everything else, tracing to Jaeger included.
# Progress goes to stderr, the export lines to stdout.
#
# Jaeger's binary takes 10-20 minutes to compile on two cores the first
# time; it is kept as $PULSE_CACHE/bin/jaeger-<version> and the image is
# built from that.
#
# Each image carries a label with a hash of its recipe and is rebuilt only
# when the recipe changes (or with --rebuild); the Debian root file system
# they all start from (pulse-local/debian:bookworm, debootstrap, a few
# minutes) is built once and kept in ~/.cache/pulse (PULSE_CACHE). Needs root (debootstrap), Docker with buildx, and Go (to fetch
# the Go toolchain as a module).
set -euo pipefail
cd "$(dirname "$0")/.."

GO_VERSION=1.26.8
REBUILD=false
[ "${1:-}" = --rebuild ] && REBUILD=true
log() { echo "local-images: $*" >&2; }
die() { log "$*"; exit 1; }

BASE=pulse-local/debian:bookworm
GO_IMAGE=pulse-local/golang:$GO_VERSION-bookworm
RUNTIME_IMAGE=pulse-local/static:nonroot
POSTGRES_IMAGE=pulse-local/postgres:15
PROMETHEUS_IMAGE=pulse-local/prometheus:2.42
PROXY_IMAGE=pulse-local/haproxy:2.6
PYTHON_IMAGE=pulse-local/python:bookworm
JAEGER_VERSION=v1.76.0
JAEGER_IMAGE=pulse-local/jaeger:${JAEGER_VERSION#v}

command -v docker >/dev/null 2>&1 || die "docker is not on PATH (scripts/ensure-docker.sh installs it)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The Debian mirror apt uses here (deb822 .sources or a one-line list).
mirror() {
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
  [ -n "$uri" ] || uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' | grep -v security | head -n1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

# build IMAGE DIR [PREPARE]: docker build DIR, unless IMAGE already carries
# the hash of DIR's recipe files; PREPARE (a function) runs first when a
# build is needed, to add large files that the recipe names by version.
build() {
  local image=$1 dir=$2 prepare=${3:-} hash have
  hash=$(cd "$dir" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  have=$(docker image inspect --format '{{index .Config.Labels "pulse.local.recipe"}}' "$image" 2>/dev/null || true)
  if [ "$have" = "$hash" ] && [ "$REBUILD" = false ]; then
    log "$image is up to date"
    return
  fi
  log "building $image"
  local started=$SECONDS
  [ -z "$prepare" ] || "$prepare" "$dir"
  docker build --progress=plain --label "pulse.local.recipe=$hash" -t "$image" "$dir" >"$WORK/build.log" 2>&1 ||
    { tail -n 40 "$WORK/build.log" >&2; die "building $image failed"; }
  log "built $image in $((SECONDS - started))s"
  # The image this one replaced, now untagged.
  docker image prune -f --filter label=pulse.local.recipe >/dev/null 2>&1 || true
}

# --- the Debian root file system --------------------------------------
# debootstrap's tree is kept as a tarball in the cache, so losing the image
# (docker system prune) costs an import, not another debootstrap.
CACHE=${PULSE_CACHE:-$HOME/.cache/pulse}
ROOTFS=$CACHE/debian-bookworm-minbase.tar
if ! docker image inspect "$BASE" >/dev/null 2>&1 || [ "$REBUILD" = true ]; then
  started=$SECONDS
  if [ ! -s "$ROOTFS" ] || [ "$REBUILD" = true ]; then
    [ "$(id -u)" = 0 ] || die "building $BASE needs root (debootstrap)"
    if ! command -v debootstrap >/dev/null 2>&1; then
      log "installing debootstrap"
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq --no-install-recommends debootstrap >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
    fi
    log "debootstrap bookworm from $(mirror) (a few minutes, once)"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" "$(mirror)" >"$WORK/debootstrap.log" 2>&1 ||
      { tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
    mkdir -p "$CACHE"
    tar -C "$WORK/rootfs" -cf "$ROOTFS.tmp" . && mv "$ROOTFS.tmp" "$ROOTFS"
    rm -rf "$WORK/rootfs"
  fi
  docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'CMD ["bash"]' \
    "$ROOTFS" "$BASE" >/dev/null || die "docker import of $ROOTFS failed"
  log "built $BASE in $((SECONDS - started))s"
fi

# Stand-ins install packages with apt like this; no daemon starts at build.
APT='echo "exit 101" >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends'
APT_CLEAN='rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /usr/sbin/policy-rc.d'

# --- Go builder ---------------------------------------------------------
# The toolchain is the module golang.org/toolchain; its files have no
# execute bits in the module zip.
d=$WORK/golang
mkdir -p "$d"
cp /etc/ssl/certs/ca-certificates.crt "$d/"
copy_go() {
  local src
  src=$(go mod download -json "golang.org/toolchain@v0.0.1-go$GO_VERSION.linux-amd64" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$src" ] && [ -d "$src/bin" ] || die "could not fetch the Go $GO_VERSION toolchain module"
  cp -r "$src" "$1/go"
  chmod -R u+w "$1/go"
}
cat >"$d/Dockerfile" <<EOF
FROM $BASE
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY go /usr/local/go
RUN chmod +x /usr/local/go/bin/* /usr/local/go/pkg/tool/linux_amd64/* \\
 && mkdir -p /go/bin /go/src && chmod -R 1777 /go
ENV GOLANG_VERSION=$GO_VERSION GOTOOLCHAIN=local GOPATH=/go \\
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /go
EOF
build "$GO_IMAGE" "$d" copy_go

# --- distroless-like runtime -------------------------------------------
d=$WORK/static
mkdir -p "$d/rootfs/etc/ssl/certs" "$d/rootfs/usr/share" "$d/rootfs/tmp" "$d/rootfs/home/nonroot"
cp /etc/ssl/certs/ca-certificates.crt "$d/rootfs/etc/ssl/certs/"
[ -d /usr/share/zoneinfo ] || die "no /usr/share/zoneinfo here (apt-get install tzdata)"
cp -r /usr/share/zoneinfo "$d/rootfs/usr/share/"
cat >"$d/rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$d/rootfs/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
echo 'hosts: files dns' >"$d/rootfs/etc/nsswitch.conf"
cat >"$d/Dockerfile" <<'EOF'
FROM scratch
COPY --chown=0:0 rootfs/ /
COPY --chown=65532:65532 rootfs/home/nonroot /home/nonroot
USER 65532:65532
WORKDIR /home/nonroot
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
EOF
chmod 1777 "$d/rootfs/tmp"
build "$RUNTIME_IMAGE" "$d"

# --- PostgreSQL ----------------------------------------------------------
d=$WORK/postgres
mkdir -p "$d"
cat >"$d/entrypoint.sh" <<'EOF'
#!/bin/bash
# Stand-in for the postgres image's entrypoint: a first start initialises
# $PGDATA with POSTGRES_USER (superuser), POSTGRES_PASSWORD (scram-sha-256
# over TCP, trust over the socket) and POSTGRES_DB, then runs postgres.
set -euo pipefail
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
[ -n "${POSTGRES_PASSWORD:-}" ] || { echo "postgres: POSTGRES_PASSWORD is required" >&2; exit 1; }
if [ "${1:-postgres}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  echo "postgres: initialising $PGDATA for $POSTGRES_USER/$POSTGRES_DB"
  pw=$(mktemp); printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
  initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    # A temporary server no client can mistake for the real one: no TCP,
    # its socket in a private directory.
    sock=$(mktemp -d)
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=$sock" start >/dev/null
    psql -v ON_ERROR_STOP=1 -h "$sock" -U "$POSTGRES_USER" -d postgres -qc "CREATE DATABASE \"$POSTGRES_DB\""
    pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
    rmdir "$sock"
  fi
  echo "postgres: ready to start"
fi
if [ "${1:-postgres}" = postgres ]; then
  shift || true
  exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
EOF
cat >"$d/Dockerfile" <<EOF
FROM $BASE
RUN $APT postgresql-15 >/dev/null && $APT_CLEAN \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql && chmod 700 /var/lib/postgresql/data
COPY --chmod=755 entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data LANG=C.UTF-8
USER postgres
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
EOF
build "$POSTGRES_IMAGE" "$d"

# --- Prometheus ----------------------------------------------------------
# Laid out like prom/prometheus: /bin/prometheus as the entrypoint (/bin is
# /usr/bin in bookworm), data in
# /prometheus owned by nobody; wget for the healthcheck (the upstream image
# has busybox's).
d=$WORK/prometheus
mkdir -p "$d"
cat >"$d/Dockerfile" <<EOF
FROM $BASE
RUN $APT prometheus wget >/dev/null && $APT_CLEAN \
 && mkdir -p /prometheus /etc/prometheus && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
VOLUME /prometheus
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
EOF
build "$PROMETHEUS_IMAGE" "$d"

# --- HAProxy (gateway-proxy) -------------------------------------------
# Laid out like the haproxy image: configuration in
# /usr/local/etc/haproxy/haproxy.cfg, runs as haproxy in the foreground
# (-db) under the master process (-W); wget for the healthcheck.
d=$WORK/haproxy
mkdir -p "$d"
cat >"$d/Dockerfile" <<EOF
FROM $BASE
RUN $APT haproxy wget >/dev/null && $APT_CLEAN && mkdir -p /usr/local/etc/haproxy
USER haproxy
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
EOF
build "$PROXY_IMAGE" "$d"

# --- Python (the Python SDK's demo) ----------------------------------------
# debian:bookworm-slim with what the demo's Dockerfile target would install:
# python3, python3-grpcio, python3-protobuf, so its build needs no mirror.
d=$WORK/python
mkdir -p "$d"
cat >"$d/Dockerfile" <<EOF
FROM $BASE
RUN $APT python3 python3-grpcio python3-protobuf >/dev/null && $APT_CLEAN
EOF
build "$PYTHON_IMAGE" "$d"

# --- Jaeger ----------------------------------------------------------------
# The all-in-one backend (cmd/jaeger of the Go module; with no config it
# keeps traces in memory, takes OTLP on 4317/4318 and serves the query API
# on 16686, each on $JAEGER_LISTEN_HOST), laid out like the upstream image:
# a static binary on a distroless-like runtime. The web UI's assets are
# not in the module, so the UI is a placeholder page; the query API
# (/api/services, /api/traces/<id>) is whole.
CACHE_BIN=$CACHE/bin
JAEGER_BIN=$CACHE_BIN/jaeger-$JAEGER_VERSION
build_jaeger() {
  [ -x "$JAEGER_BIN" ] && return
  local started=$SECONDS dir src
  log "building jaeger $JAEGER_VERSION from its Go module (10-20 minutes on two cores, once; cached in $JAEGER_BIN)"
  dir=$(go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || die "go mod download github.com/jaegertracing/jaeger@$JAEGER_VERSION failed"
  src="$WORK/jaeger-src"
  cp -r "$dir" "$src"
  chmod -R u+w "$src"
  mkdir -p "$CACHE_BIN"
  (cd "$src" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$JAEGER_BIN.tmp" ./cmd/jaeger) \
    >"$WORK/jaeger-build.log" 2>&1 || { tail -n 30 "$WORK/jaeger-build.log" >&2; die "building jaeger failed"; }
  rm -rf "$src"
  mv "$JAEGER_BIN.tmp" "$JAEGER_BIN"
  log "built jaeger in $((SECONDS - started))s"
}
build_jaeger
d=$WORK/jaeger
mkdir -p "$d"
copy_jaeger() { cp "$JAEGER_BIN" "$1/jaeger"; }
cat >"$d/Dockerfile" <<EOF
FROM $RUNTIME_IMAGE
COPY --chmod=755 jaeger /usr/local/bin/jaeger
# Every endpoint of the built-in all-in-one config listens on this host.
ENV JAEGER_LISTEN_HOST=0.0.0.0
# OTLP gRPC and HTTP, query API and UI, health check.
EXPOSE 4317 4318 16686 13133
ENTRYPOINT ["/usr/local/bin/jaeger"]
EOF
# The recipe names the version, so a new version rebuilds the image.
echo "$JAEGER_VERSION" >"$d/version"
build "$JAEGER_IMAGE" "$d" copy_jaeger

# Grafana has no stand-in: COMPOSE_FILE adds the file that leaves it out.
cat <<EOF
export COMPOSE_FILE=$PWD/docker-compose.yml:$PWD/deploy/docker/compose.local-images.yml
export PULSE_GO_IMAGE=$GO_IMAGE
export PULSE_RUNTIME_IMAGE=$RUNTIME_IMAGE
export PULSE_POSTGRES_IMAGE=$POSTGRES_IMAGE
export PULSE_PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE
export PULSE_PROXY_IMAGE=$PROXY_IMAGE
export PULSE_PYTHON_IMAGE=$PYTHON_IMAGE
export PULSE_JAEGER_IMAGE=$JAEGER_IMAGE
EOF
