#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries (initdb, pg_ctl) exist; tests and
# the no-Docker fleet start throwaway clusters from them. Installs Debian's
# postgresql package when they are missing and we are allowed to.
set -euo pipefail

have_pg() {
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null 2>&1
}

if have_pg; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-postgres: installing Debian's postgresql server binaries" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  # Debian starts a cluster on install; tests bring their own, so stop it.
  (service postgresql stop || true) >/dev/null 2>&1
fi
if ! have_pg; then
  echo "ensure-postgres: no PostgreSQL server binaries (initdb, pg_ctl) found; install the 'postgresql' package or set PULSE_TEST_DATABASE_URL" >&2
  exit 1
fi
