#!/usr/bin/env bash
# Generate the Python stubs for proto/tether/v1/broker.proto.
#
#   test/python/gen.sh [OUT]     (OUT defaults to sdk/python: the SDK's tether/v1/)
#
# The toolchain is Debian bookworm's protobuf-compiler (protoc 3.21.12) and
# protobuf-compiler-grpc (grpc_python_plugin 1.51.1); other versions emit
# different (equally valid) code, so the committed stubs would churn. Set
# TETHER_PROTOC_ANY=1 to generate with whatever protoc is installed.
#
# Exit status 3 means the toolchain is missing or not the pinned version.
set -euo pipefail

want_protoc="libprotoc 3.21.12"
want_plugin="1.51.1"

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$repo/sdk/python}
include=${PROTOC_INCLUDE:-/usr/include}

missing() { echo "gen.sh: $*" >&2; exit 3; }

protoc=$(command -v protoc) || missing "protoc not found; apt-get install -y protobuf-compiler"
plugin=$(command -v grpc_python_plugin) || missing "grpc_python_plugin not found; apt-get install -y protobuf-compiler-grpc"
[ -f "$include/google/protobuf/duration.proto" ] ||
  missing "google/protobuf well-known types not under $include; set PROTOC_INCLUDE"

have_protoc=$("$protoc" --version)
# grpc_python_plugin has no --version; ask dpkg where there is one.
have_plugin=$(dpkg-query -W -f '${Version}' protobuf-compiler-grpc 2>/dev/null || echo unknown)
echo "gen.sh: $have_protoc ($protoc), grpc_python_plugin $have_plugin ($plugin)" >&2
if [ "${TETHER_PROTOC_ANY:-}" != 1 ]; then
  [ "$have_protoc" = "$want_protoc" ] || missing "want $want_protoc, have $have_protoc (TETHER_PROTOC_ANY=1 to use it anyway)"
  case $have_plugin in
    "$want_plugin"|"$want_plugin"-*) ;;
    *) missing "want grpc_python_plugin $want_plugin, have $have_plugin (TETHER_PROTOC_ANY=1 to use it anyway)" ;;
  esac
fi

mkdir -p "$out/tether/v1"
cd "$repo"
"$protoc" -I proto -I "$include" \
  --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" \
  tether/v1/broker.proto
# Regular packages, so "tether" cannot be shadowed by a namespace package.
# An __init__.py that exists is left alone: in sdk/python it is the SDK's.
for init in "$out/tether/__init__.py" "$out/tether/v1/__init__.py"; do
  [ -e "$init" ] || : >"$init"
done
echo "gen.sh: wrote $out/tether/v1/broker_pb2.py and broker_pb2_grpc.py" >&2
