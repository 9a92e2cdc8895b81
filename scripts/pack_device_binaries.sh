#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries here (CUDA build, sm_90a) and packs them small
# enough to carry to the GPU lease machine, which has no Debian dev packages and where a build
# costs device minutes. Output: build-cuda/devgz/ (gzipped stripped binaries + the shared
# libraries the hyperstream binary needs that the device lacks). Carry it with
# `carry: ["build-cuda/devgz"]` and run there with scripts/run_device_binaries.sh.
#
#   scripts/pack_device_binaries.sh [target ...]     (default: hyperstream test_parity_cuda)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(hyperstream test_parity_cuda)
export PATH=/usr/local/cuda/bin:$PATH
[ -f build-cuda/build.ninja ] || cmake -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DHS_CUDA=ON >/dev/null
ninja -C build-cuda "${targets[@]}"
out=build-cuda/devgz
rm -rf "$out" && mkdir -p "$out/lib"
for t in "${targets[@]}"; do
  bin=$(find build-cuda -maxdepth 3 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "pack_device_binaries: no binary for $t" >&2; exit 1; }
  strip -o "$out/$t" "$bin"
  gzip -9 "$out/$t"
done
# The hyperstream binary links the server's libraries dynamically; the device has CUDA only.
for l in libpcre2-8.so.0 libcpp-httplib.so.0.11 libssl.so.3 libcrypto.so.3 libz.so.1 libbrotlidec.so.1 \
         libbrotlienc.so.1 libbrotlicommon.so.1; do
  [ -e "/lib/x86_64-linux-gnu/$l" ] && cp -L "/lib/x86_64-linux-gnu/$l" "$out/lib/"
done
tar czf "$out/lib.tgz" -C "$out" lib && rm -rf "$out/lib"
du -sh "$out"
echo "carry [\"$out\"]; on the device: scripts/run_device_binaries.sh BINARY [ARGS...]"
