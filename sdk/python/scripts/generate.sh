#!/usr/bin/env bash
# Regenerates the Python protobuf modules (pulsequeue/pb/pulse/v1/*_pb2.py)
# from proto/pulse/v1 with Debian's protoc, the same major version as the
# python3-protobuf runtime the SDK runs on. The generated imports are
# rewritten from "pulse.v1" to "pulsequeue.pb.pulse.v1" so the modules live
# inside the SDK's package instead of claiming a top-level "pulse" package.
# Service stubs are hand-written (pulsequeue/_stubs.py): Debian has no
# grpc_tools recent enough to generate them.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
"$here/scripts/ensure-deps.sh" --protoc >/dev/null
out="$here/pulsequeue/pb"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$repo/proto" && protoc -I . -I /usr/include --python_out="$tmp" pulse/v1/*.proto)
rm -rf "$out/pulse"
mkdir -p "$out/pulse/v1"
for f in "$tmp"/pulse/v1/*_pb2.py; do
  sed -e 's/^from pulse\.v1 import /from pulsequeue.pb.pulse.v1 import /' "$f" >"$out/pulse/v1/$(basename "$f")"
done
: >"$out/pulse/__init__.py"
: >"$out/pulse/v1/__init__.py"
echo "generate: wrote $(ls "$out"/pulse/v1/*_pb2.py | wc -l) modules under ${out#"$repo"/}" >&2
