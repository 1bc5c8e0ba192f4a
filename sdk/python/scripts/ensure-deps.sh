#!/usr/bin/env bash
# Makes sure Debian's python3 has what the SDK runs on (python3-grpcio,
# python3-protobuf); with --protoc, what regenerating its protobuf code
# needs (protobuf-compiler, libprotobuf-dev for the well-known types); with
# --test, what its tests need besides (python3-venv, python3-pip and
# python3-setuptools for the packaging test, openssl for the TLS test,
# pyflakes3 for the lint). Installs the Debian packages when they are
# missing and we may (root with apt-get), like scripts/ensure-postgres.sh
# does for Postgres. Prints the interpreter to use on stdout.
set -euo pipefail
py="${PULSE_PYTHON:-/usr/bin/python3}"
need=()
if ! "$py" -c 'import grpc, google.protobuf' >/dev/null 2>&1; then
  need+=(python3-grpcio python3-protobuf)
fi
want_test=false want_protoc=false
for arg in "$@"; do
  case $arg in
    --test) want_test=true ;;
    --protoc) want_protoc=true ;;
    *) echo "ensure-deps: unknown flag $arg (--test, --protoc)" >&2; exit 2 ;;
  esac
done
if $want_test; then
  # The packaging test installs the SDK into a venv with pip.
  "$py" -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
  "$py" -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
  "$py" -c 'import setuptools' >/dev/null 2>&1 || need+=(python3-setuptools)
  command -v openssl >/dev/null 2>&1 || need+=(openssl)  # the TLS test makes its certificates
  command -v pyflakes3 >/dev/null 2>&1 || need+=(pyflakes3)  # test.sh lints first
fi
if $want_protoc; then
  command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
  [ -f /usr/include/google/protobuf/duration.proto ] || need+=(libprotobuf-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: installing Debian's ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "ensure-deps: missing ${need[*]} for $py; install those Debian packages (or set PULSE_PYTHON to an interpreter that has grpcio and protobuf)" >&2
    exit 1
  fi
fi
"$py" -c 'import grpc, google.protobuf' || { echo "ensure-deps: $py still cannot import grpc and google.protobuf" >&2; exit 1; }
echo "$py"
