#!/usr/bin/env bash
# make compose-test: runs docker-compose.yml for real and drives the fleet
# (deploy/composetest): builds every pulse image from the Dockerfile, brings
# the fleet up with three gateways and Jaeger (grafana left out), sends jobs
# from the host and from workers in containers, follows two jobs' traces
# and a stored exemplar in Jaeger, pauses and resumes, kills a gateway and
# scales the tier under load, checks every dashboard panel has data, then
# `down -v`.
#
# On a machine of the kind CI runs on, it first installs what it needs:
# Docker (Debian's docker.io) and a running dockerd, the compose and buildx
# plugins (built once from their Go modules), and local stand-ins for the
# base images and Jaeger (scripts/local-images.sh), since no image registry is
# reachable. Everything is cached (~/.cache/pulse, Docker's image store,
# BuildKit's cache mounts for Go's module and build caches), so a second
# run skips straight to the test.
#
#   PULSE_COMPOSE_UPSTREAM=1   use the upstream base images (pulled) instead
#                              of the local stand-ins; PULSE_*_IMAGE already
#                              set in the environment are used as they are
#   PULSE_COMPOSE_KEEP=1       leave the project up afterwards, for a look
#
# Exits non-zero on any failure, after printing the state of every
# container and the logs of the failing ones (all logs:
# .artifacts/compose-test/).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
log() { echo "compose-test: $*" >&2; }

command -v go >/dev/null 2>&1 || { log "Go is not on PATH (need Go >= 1.26.7)"; exit 1; }

t0=$SECONDS
scripts/ensure-docker.sh
log "docker ready ($((SECONDS - t0))s)"

if [ "${PULSE_COMPOSE_UPSTREAM:-}" != 1 ]; then
  t0=$SECONDS
  images=$(scripts/local-images.sh)
  # Variables the caller set win over the stand-ins.
  while read -r _ assignment; do
    name=${assignment%%=*}
    [ -n "${!name:-}" ] || export "$assignment"
  done <<<"$images"
  log "base images ready ($((SECONDS - t0))s): $(env | grep -E '^PULSE_[A-Z]+_IMAGE=' | sort | tr '\n' ' ')"
fi

rm -rf .artifacts/compose-test
cd deploy/composetest
set +e
GOWORK=off PULSE_COMPOSE_TEST=1 go test -count=1 -v -timeout 45m -run '^TestComposeUp$' .
rc=$?
set -e
# Each build that changed the code left the previous pulse images untagged;
# drop those (the build cache stays, so the next run is as quick).
docker image prune -f --filter label=org.opencontainers.image.vendor=pulse >/dev/null 2>&1 || true
log "finished in $((SECONDS - started))s (exit $rc)"
exit $rc
