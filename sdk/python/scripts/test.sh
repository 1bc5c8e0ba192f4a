#!/usr/bin/env bash
# The Python SDK's tests (make sdk-python-test): the option and wire checks,
# and the protocol against a real fleet, which tests/fleet.py starts
# (pulse-dev: a throwaway Postgres and the real services) unless
# PULSE_SDK_TEST_CONTROL and PULSE_SDK_TEST_GATEWAYS name one. Debian's
# python3 with python3-grpcio and python3-protobuf, installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
py="$(scripts/ensure-deps.sh --test --protoc)"
# The generated code must be what scripts/generate.sh writes from proto/.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -r pulsequeue/pb "$tmp/before"
scripts/generate.sh 2>/dev/null
if ! diff -r -x __pycache__ "$tmp/before" pulsequeue/pb >/dev/null; then
  echo "sdk-python-test: pulsequeue/pb was stale; scripts/generate.sh regenerated it: commit the change" >&2
  exit 1
fi
rm -rf "$tmp"
trap - EXIT
# Unused imports, undefined names and the like: Debian's pyflakes3.
pyflakes3 pulsequeue/*.py tests/*.py conformance/*.py examples/*.py
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m unittest discover -s tests -t . "$@"
