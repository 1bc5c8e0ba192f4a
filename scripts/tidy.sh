#!/usr/bin/env bash
# make tidy: `go mod tidy` in every module, each on its own (GOWORK=off), as
# a stranger's go command would see it. The modules require each other at
# a version (scripts/modversion.sh) the module proxy may not serve yet, so
# they are served from this working tree through a file-based proxy
# (tools/modproxy) ahead of the real one, into a throwaway module cache so
# that no unreleased copy of pulse ends up in the machine's cache. The
# throwaway cache fills from the machine's cache (its download directory
# is itself a file proxy) before the network.
#
# go.sum keeps, for pulse's own modules, exactly the lines it had: those a
# release wrote are the hashes of the tagged tree; the ones this proxy
# would produce are the hashes of an untagged working tree, wrong as soon
# as it differs from the release, so they are never written.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(scripts/modversion.sh)
mapfile -t mods < <(go list -m -f '{{.Dir}}')
[ ${#mods[@]} -gt 1 ] || { echo "tidy: go list -m found no workspace modules" >&2; exit 1; }
mods+=("$PWD/deploy/composetest" "$PWD/tools")
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
(cd tools && GOWORK=off go run ./modproxy -root .. -version "$version" -out "$tmp/proxy")

hostcache=$(go env GOMODCACHE)
export GOWORK=off
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export GOPROXY="file://$tmp/proxy,file://$hostcache/cache/download,$(go env GOPROXY)"
export GONOSUMDB="github.com/pulsequeue/*"
export GOMODCACHE="$tmp/modcache"

for d in "${mods[@]}"; do
  echo "tidy: ${d#"$PWD"/}"
  saved=""
  [ -f "$d/go.sum" ] && saved=$(grep '^github.com/pulsequeue/' "$d/go.sum" || true)
  (cd "$d" && go mod tidy)
  # Tidy's own lines for pulse modules go (their order kept); lines the
  # go.sum had before come back (sorted in again by module and version).
  if [ -f "$d/go.sum" ] && { [ -n "$saved" ] || grep -q '^github.com/pulsequeue/' "$d/go.sum"; }; then
    if [ -z "$saved" ]; then
      grep -v '^github.com/pulsequeue/' "$d/go.sum" > "$d/go.sum.new" || true
    else
      { grep -v '^github.com/pulsequeue/' "$d/go.sum" || true; echo "$saved"; } |
        LC_ALL=C sort -s -k1,1 -k2,2V > "$d/go.sum.new"
    fi
    if [ -s "$d/go.sum.new" ]; then mv "$d/go.sum.new" "$d/go.sum"; else rm -f "$d/go.sum.new" "$d/go.sum"; fi
  fi
done
