#!/usr/bin/env bash
# scripts/set-version.sh vX.Y.Z: every requirement of a pulse module on
# another (github.com/pulsequeue/pulse/...) becomes vX.Y.Z, in every go.mod
# of the repository, and go.work's replace block wires each of those
# versions to its directory (the module proxy serves a version only once
# its tag is pushed; inside the workspace it is this tree either way).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-}
if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "set-version: the version must look like v1.2.3 or v1.2.3-rc.1, got '${version}'" >&2
  exit 2
fi
case $version in
  v0.* | v1.*) ;;
  *) echo "set-version: $version: a major version past v1 needs /vN module paths, which pulse's modules do not have" >&2; exit 2 ;;
esac
prefix=github.com/pulsequeue/pulse

# pulsereqs FILE: the pulse module paths FILE requires.
pulsereqs() {
  GOWORK=off go mod edit -json "$1" | awk -v p="\"$prefix" '
    /"Require": \[/ {inreq=1} inreq && /^\t\]/ {inreq=0}
    inreq && /"Path":/ && index($2, p) == 1 { gsub(/[",]/, "", $2); print $2 }'
}

declare -A required=()
for gomod in $(git ls-files '*go.mod' 'go.mod'); do
  args=()
  for p in $(pulsereqs "$gomod"); do
    args+=("-require=$p@$version")
    required[$p]=1
  done
  if [ ${#args[@]} -gt 0 ]; then
    GOWORK=off go mod edit "${args[@]}" "$gomod"
  fi
done

# go.work: its block of pulse replaces (from the marker comment to the
# block's closing parenthesis) is rewritten, one line per required module.
marker='// Every module requires its siblings at the version they will be released'
lines=()
for p in $(printf '%s\n' "${!required[@]}" | LC_ALL=C sort); do
  dir=./${p#"$prefix"/}
  [ -f "$dir/go.mod" ] || { echo "set-version: $p is required but $dir/go.mod does not exist" >&2; exit 1; }
  lines+=("$(printf '\t%s %s => %s' "$p" "$version" "$dir")")
done
awk -v m="$marker" 'index($0, m) == 1 {skip=1} !skip {print} skip && /^\)$/ {skip=0}' go.work |
  sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' > go.work.new
{
  cat go.work.new
  echo
  echo "$marker"
  echo '// at (scripts/set-version.sh writes both), which the module proxy may not'
  echo '// serve yet: inside the workspace, each of those versions is this tree.'
  echo 'replace ('
  printf '%s\n' "${lines[@]}"
  echo ')'
} > go.work
rm go.work.new
go work edit -json > /dev/null

# The TypeScript SDK's package carries the same version (without the v):
# package.json and its lock file's root entries.
command -v node >/dev/null 2>&1 || { echo "set-version: node is not on PATH; it rewrites sdk/typescript/package.json's version" >&2; exit 1; }
node -e '
const fs = require("fs");
const v = process.argv[1];
for (const f of ["sdk/typescript/package.json", "sdk/typescript/package-lock.json"]) {
  const j = JSON.parse(fs.readFileSync(f, "utf8"));
  j.version = v;
  if (j.packages && j.packages[""]) j.packages[""].version = v;
  fs.writeFileSync(f, JSON.stringify(j, null, 2) + "\n");
}' "${version#v}"

# The Python SDK too: pyproject.toml's version and the package's
# __version__ (sdk/python/tests hold them to scripts/modversion.sh).
sed -i -e 's/^version = ".*"$/version = "'"${version#v}"'"/' sdk/python/pyproject.toml
sed -i -e 's/^__version__ = ".*"$/__version__ = "'"${version#v}"'"/' sdk/python/pulsequeue/_version.py
grep -qx "version = \"${version#v}\"" sdk/python/pyproject.toml || { echo "set-version: sdk/python/pyproject.toml has no version line to set" >&2; exit 1; }
grep -qx "__version__ = \"${version#v}\"" sdk/python/pulsequeue/_version.py || { echo "set-version: sdk/python/pulsequeue/_version.py has no __version__ line to set" >&2; exit 1; }
echo "set-version: pulse modules now require each other at $version (the TypeScript and Python SDKs are ${version#v})"
