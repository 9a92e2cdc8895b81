#!/usr/bin/env bash
# On the GPU lease machine: unpacks build-cuda/devgz (scripts/pack_device_binaries.sh) once and
# runs one of its binaries with the carried libraries, e.g.
#   scripts/run_device_binaries.sh hyperstream bench --synthetic flash --layers 8 --quant mxfp4
#   scripts/run_device_binaries.sh test_parity_cuda
# HS_DEVGZ=DIR (relative to the repository root) runs binaries packed elsewhere (default
# build-cuda/devgz), e.g. a second build directory packed the same way.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
d=$root/${HS_DEVGZ:-build-cuda/devgz}
[ $# -ge 1 ] || { echo "usage: $0 BINARY [ARGS...]" >&2; exit 2; }
if [ -f "$d/bins.tar.xz" ] && [ ! -d "$d/lib" ]; then
  # (Python's lzma: the lease machine may lack the xz tool.)
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$d/bins.tar.xz" "$d"
fi
[ -d "$d/lib" ] || tar xzf "$d/lib.tgz" -C "$d"
[ -x "$d/$1" ] || { gunzip -kf "$d/$1.gz" && chmod +x "$d/$1"; }
export LD_LIBRARY_PATH="$d/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$1
shift
exec "$d/$bin" "$@"
