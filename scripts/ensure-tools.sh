#!/usr/bin/env bash
# Installs the real programs some tests drive, from Debian's packages, when
# they are missing: prometheus + promtool (config checks and dashboards
# evaluated against a real Prometheus) and chromium (the web dashboard's
# browser tests, driven with chromedp). A test whose program is still
# missing fails, saying how to get it; a developer who cannot install one
# skips those tests explicitly with PULSE_TEST_SKIP_TOOLS=prometheus,chromium
# (docs/development.md), which CI never sets and which CI ignores.
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-tools: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts the packaged Prometheus; tests run their own.
  (service prometheus stop || true) >/dev/null 2>&1
else
  echo "ensure-tools: ${missing[*]} missing and cannot be installed here (not root, or no apt-get); the tests that need it will fail." >&2
  echo "ensure-tools: install it (Debian: apt-get install -y ${missing[*]}), or skip those tests on this machine with PULSE_TEST_SKIP_TOOLS=$(IFS=,; echo "${missing[*]}")" >&2
fi
