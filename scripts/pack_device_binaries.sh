#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries here (CUDA build, sm_90a) and packs them small
# enough to carry to the GPU lease machine, which has no Debian dev packages and where a build
# costs device minutes. Output: build-cuda/devgz/bins.tar.xz (stripped binaries + the shared
# libraries the hyperstream binary needs that the device lacks). Carry it with
# `carry: ["build-cuda/devgz"]` and run there with scripts/run_device_binaries.sh.
#
#   scripts/pack_device_binaries.sh [target ...]     (default: hyperstream test_parity_cuda)
#
# HS_BUILD_DIR=DIR builds and packs in another build directory (default build-cuda; output
# DIR/devgz, run there with HS_DEVGZ=DIR/devgz scripts/run_device_binaries.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(hyperstream test_parity_cuda)
export PATH=/usr/local/cuda/bin:$PATH
b=${HS_BUILD_DIR:-build-cuda}
[ -f "$b/build.ninja" ] || cmake -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHS_CUDA=ON >/dev/null
ninja -C "$b" "${targets[@]}"
out=$b/devgz
rm -rf "$out" && mkdir -p "$out/bin/lib"
for t in "${targets[@]}"; do
  # The build's own outputs first: a copy of the same name elsewhere under $b (an older carry)
  # must not be packed instead.
  bin=""
  for d in "$b/src" "$b/tests" "$b/bench" "$b"; do
    [ -x "$d/$t" ] && [ -f "$d/$t" ] && { bin=$d/$t; break; }
  done
  [ -n "$bin" ] || bin=$(find "$b" -maxdepth 3 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "pack_device_binaries: no binary for $t" >&2; exit 1; }
  strip -o "$out/bin/$t" "$bin"
done
# The hyperstream binary links the server's libraries dynamically; the device has CUDA only.
for l in libpcre2-8.so.0 libz.so.1; do
  [ -e "/lib/x86_64-linux-gnu/$l" ] && cp -L "/lib/x86_64-linux-gnu/$l" "$out/bin/lib/"
done
# One xz stream over everything: the binaries share most of their code (the engine and the
# kernels are linked into each), which a 64 MiB dictionary stores once. Several test binaries
# then fit the lease machine's 64 MiB carry limit together.
tar cf - -C "$out/bin" . | xz -9e -T2 --lzma2=preset=9e,dict=192MiB > "$out/bins.tar.xz"
rm -rf "$out/bin"
du -sh "$out"
echo "carry [\"$out\"]; on the device: HS_DEVGZ=$out scripts/run_device_binaries.sh BINARY [ARGS...]"
