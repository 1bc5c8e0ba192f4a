#!/usr/bin/env bash
# make release VERSION=vX.Y.Z: release every module of the workspace at
# vX.Y.Z (ADR-0030).
#
#  1. Checks: VERSION is a semantic version, the tree is clean (nothing
#     modified, nothing untracked), CHANGELOG.md has a section for it
#     ("## [X.Y.Z]"), and no tag of it exists.
#  2. Every requirement between pulse modules becomes VERSION
#     (scripts/set-version.sh, go.work too).
#  3. dist/: the pulse CLI and the four services for linux and darwin on
#     amd64 and arm64 (CGO off, -trimpath, the version stamped with
#     -ldflags), one pulse_VERSION_OS_ARCH.tar.gz per platform
#     (reproducible: sorted, owner 0, the commit's time) and SHA256SUMS.
#     Each binary's --version must print VERSION (checked on the native
#     platform).
#  4. Images pulse/<service>:VERSION (deploy/docker/Dockerfile, the version
#     stamped), when Docker answers; otherwise it says it skipped them.
#  5. Commits the requirements ("release: VERSION", when they changed) and
#     tags every module: <dir>/VERSION (pkg/v0.1.0, pkg/server/v0.1.0,
#     services/control-api/v0.1.0, ...). There is no root module, so no
#     bare VERSION tag. It pushes nothing; it prints the push command.
#
# DRY_RUN=1 does all of it but step 5, and puts the tree back as it was.
# PLATFORMS="linux/amd64 ..." narrows step 3; IMAGES=0 skips step 4 (and
# says so).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:-${1:-}}
dry=${DRY_RUN:-0}
platforms=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
images=${IMAGES:-1}
prefix=github.com/pulsequeue/pulse
log() { echo "release: $*"; }
die() { echo "release: $*" >&2; exit 1; }

# 1. Checks.
[[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION must be a semantic version like v1.2.3 (got '${version}')"
case $version in
  v0.* | v1.*) ;;
  *) die "VERSION $version: a major version past v1 needs /vN module paths, which pulse's modules do not have" ;;
esac
[ -z "$(git status --porcelain)" ] ||
  die "the tree is not clean; commit or stash first:
$(git status --short)"
grep -qE "^## \[${version#v}\]" CHANGELOG.md ||
  die "CHANGELOG.md has no section for $version: add '## [${version#v}] - $(date -u +%Y-%m-%d)' with its changes"
mapfile -t dirs < <(go list -m -f '{{.Dir}}' | sed "s|^$PWD/||" | LC_ALL=C sort)
[ ${#dirs[@]} -gt 1 ] || die "go list -m found no workspace modules"
for d in "${dirs[@]}"; do
  if git rev-parse -q --verify "refs/tags/$d/$version" >/dev/null; then
    die "tag $d/$version exists already"
  fi
done
if [ "$dry" = 1 ]; then log "dry run of $version: nothing will be committed or tagged"; fi

# 2. Requirements. A dry run (or a failure before the commit) puts every
# file back: the tree was clean, so that is all the release changed.
committed=0
restore() { if [ "$committed" = 0 ]; then git checkout -q -- .; fi; }
trap restore EXIT
scripts/set-version.sh "$version"

# 3. Binaries.
cmds=(cli/cmd/pulse services/control-api services/dispatch-gateway services/reaper services/scheduler)
ldflags="-s -w -X $prefix/pkg/buildinfo.Stamp=$version"
mtime=$(git log -1 --format=%ct)
rm -rf dist
mkdir -p dist
native="$(go env GOHOSTOS)/$(go env GOHOSTARCH)"
for p in $platforms; do
  goos=${p%/*}
  goarch=${p#*/}
  name="pulse_${version}_${goos}_${goarch}"
  log "building $name"
  mkdir -p "dist/$name"
  for c in "${cmds[@]}"; do
    CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -buildvcs=false -ldflags "$ldflags" \
      -o "dist/$name/$(basename "$c")" "./$c"
  done
  cp README.md CHANGELOG.md "dist/$name/"
  if [ "$p" = "$native" ]; then
    for c in "${cmds[@]}"; do
      b=$(basename "$c")
      got=$("dist/$name/$b" --version)
      [ "$got" = "$b $version" ] || die "dist/$name/$b --version printed '$got', want '$b $version'"
    done
    log "every $native binary reports $version"
  fi
  tar --sort=name --mtime="@$mtime" --owner=0 --group=0 --numeric-owner -C dist -cf - "$name" | gzip -n > "dist/$name.tar.gz"
  rm -rf "dist/$name"
done
(cd dist && sha256sum -- *.tar.gz > SHA256SUMS)
log "dist/: $(cd dist && ls | tr '\n' ' ')"

# 4. Images.
if [ "$images" = 0 ]; then
  log "skipping the images (IMAGES=0)"
elif ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  log "skipping the images: Docker is not available (scripts/ensure-docker.sh installs it)"
else
  for s in control-api dispatch-gateway reaper scheduler; do
    log "image pulse/$s:$version"
    docker build -q -f deploy/docker/Dockerfile --target "$s" --build-arg "VERSION=$version" \
      -t "pulse/$s:$version" . >/dev/null
  done
fi

# 5. Commit and tags.
if [ "$dry" = 1 ]; then
  log "dry run: would commit the requirements at $version and tag: $(printf '%s ' "${dirs[@]/%//$version}")"
  exit 0
fi
if [ -n "$(git status --porcelain)" ]; then
  git commit -q -am "release: $version"
  log "committed the requirements at $version"
else
  log "the modules already require $version: nothing to commit"
fi
committed=1
tags=()
for d in "${dirs[@]}"; do
  git tag -a -m "pulse $version ($prefix/$d)" "$d/$version"
  tags+=("$d/$version")
done
log "tagged $(git rev-parse --short HEAD): ${tags[*]}"
log "publish with: git push origin HEAD ${tags[*]}"
