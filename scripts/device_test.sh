#!/usr/bin/env bash
# Builds and runs the CUDA backend checks on the GPU lease machine:
# tests/test_backend_ops (every CUDA op vs its CPU twin) and bench/bench_matvec_cuda
# (batch-1 matvec bandwidth vs a device-to-device copy). Logs and a summary go to $OUT.
#
#   scripts/device_test.sh [options]
#     --build-dir DIR   build tree (default build-device)
#     --standalone      skip the CMake project; compile just what the two programs need
#     --prebuilt DIR    use DIR/test_backend_ops and DIR/bench_matvec_cuda when they start on
#                       this machine (else build them)
#     --build-only      build, do not run
#     --no-bench        skip the benchmark
#     --gtest-filter F  passed to the test binary
#   Environment: OUT (log folder, default <build>/out), HS_BENCH_ARGS (extra benchmark flags,
#   e.g. --variants), HS_CUDA_ARCH (default 90a), HS_TEST_TIMEOUT / HS_BENCH_TIMEOUT (s).
#
# Dependencies come from .devdeps/ (scripts/pack_device_deps.sh on a machine that has the
# Debian dev packages; carry it to the device with `carry: [".devdeps"]`), or from /usr.
# The CMake path configures the whole project with -DHS_DEPS_PREFIX=.devdeps and builds only
# the two targets. When that fails (for instance another layer's work in progress does not
# compile), the script falls back to the standalone build, which compiles kernels/cuda,
# kernels/cpu, format and util directly.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build-device
standalone=0
prebuilt=""
build_only=0
bench=1
filter=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --standalone) standalone=1; shift ;;
    --prebuilt) prebuilt=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --no-bench) bench=0; shift ;;
    --gtest-filter) filter=$2; shift 2 ;;
    *) echo "device_test.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
out=${OUT:-$build/out}
mkdir -p "$build" "$out"
arch=x86_64-linux-gnu
deps=$root/.devdeps
[ -d "$deps" ] || deps=/usr
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
export LD_LIBRARY_PATH="$cuda/lib64:$deps/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cuda_arch=${HS_CUDA_ARCH:-90a}
jobs=$(nproc 2>/dev/null || echo 4)
log() { echo "[device_test] $*" | tee -a "$out/device_test.log"; }

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total --format=csv 2>&1
  nvcc --version 2>&1 | tail -2; cmake --version 2>&1 | head -1; c++ --version 2>&1 | head -1; } >"$out/machine.txt"

test_bin=""
bench_bin=""

try_prebuilt() {
  [ -n "$prebuilt" ] || return 1
  if "$prebuilt/test_backend_ops" --gtest_list_tests >/dev/null 2>"$out/prebuilt.err"; then
    test_bin=$prebuilt/test_backend_ops
    bench_bin=$prebuilt/bench_matvec_cuda
    rm -f "$out/prebuilt.err"
    log "using prebuilt binaries from $prebuilt"
    return 0
  fi
  log "prebuilt binaries do not start here ($(head -c 300 "$out/prebuilt.err")); building"
  return 1
}

cmake_build() {
  local t0=$SECONDS
  log "configure (cmake, HS_DEPS_PREFIX=$deps)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHS_DEPS_PREFIX="$deps" \
    -DGTest_DIR="$deps/lib/$arch/cmake/GTest" -Dbenchmark_DIR="$deps/lib/$arch/cmake/benchmark" \
    -Dnlohmann_json_DIR="$deps/share/cmake/nlohmann_json" -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" \
    >"$out/configure.log" 2>&1 || { log "configure failed (see configure.log)"; return 1; }
  log "build test_backend_ops bench_matvec_cuda (ninja -j$jobs)"
  ninja -C "$build" -j"$jobs" test_backend_ops bench_matvec_cuda >"$out/build.log" 2>&1 ||
    { log "cmake build failed after $((SECONDS - t0)) s (see build.log)"; return 1; }
  test_bin=$build/tests/test_backend_ops
  bench_bin=$build/bench/bench_matvec_cuda
  log "cmake build done in $((SECONDS - t0)) s"
}

standalone_build() {
  local t0=$SECONDS sd=$build/standalone
  mkdir -p "$sd/obj"
  log "standalone build in $sd"
  local cxxflags="-O3 -DNDEBUG -std=c++20 -Wall -Wextra -DHS_HAVE_CUDA=1 -Isrc -isystem $deps/include -isystem $cuda/include"
  local nvflags="-O3 -DNDEBUG -std=c++17 -DHS_HAVE_CUDA=1 -Isrc -isystem $deps/include --generate-code=arch=compute_${cuda_arch},code=[compute_${cuda_arch},sm_${cuda_arch}] -Xcompiler -Wall,-Wextra"
  local srcs=(src/kernels/cpu/*.cpp src/format/*.cpp src/util/*.cpp)
  local cus=(src/kernels/cuda/*.cu)
  {
    for f in "${srcs[@]}" tests/test_backend_ops.cpp; do echo "c++ $cxxflags -c $f -o $sd/obj/$(echo "$f" | tr / _).o"; done
    for f in "${cus[@]}" bench/bench_matvec_cuda.cu; do echo "nvcc $nvflags -c $f -o $sd/obj/$(echo "$f" | tr / _).o"; done
  } >"$sd/commands.txt"
  xargs -P "$jobs" -I{} sh -c '{}' <"$sd/commands.txt" >"$out/standalone_build.log" 2>&1 ||
    { log "standalone compile failed (see standalone_build.log)"; return 1; }
  local common=()
  for f in "${srcs[@]}" "${cus[@]}"; do common+=("$sd/obj/$(echo "$f" | tr / _).o"); done
  local libs="-L$cuda/lib64 -lcublas -lcublasLt -lcudart -Wl,-rpath,$cuda/lib64 -lpthread"
  c++ -o "$sd/test_backend_ops" "$sd/obj/tests_test_backend_ops.cpp.o" "${common[@]}" \
    -L"$deps/lib/$arch" -lgtest_main -lgtest $libs >>"$out/standalone_build.log" 2>&1 &&
  c++ -o "$sd/bench_matvec_cuda" "$sd/obj/bench_bench_matvec_cuda.cu.o" "${common[@]}" $libs \
    >>"$out/standalone_build.log" 2>&1 || { log "standalone link failed (see standalone_build.log)"; return 1; }
  test_bin=$sd/test_backend_ops
  bench_bin=$sd/bench_matvec_cuda
  log "standalone build done in $((SECONDS - t0)) s"
}

try_prebuilt || { [ $standalone = 0 ] && cmake_build; } || standalone_build || exit 1
[ $build_only = 1 ] && exit 0

rc=0
log "run $test_bin"
t0=$SECONDS
timeout "${HS_TEST_TIMEOUT:-900}" "$test_bin" --gtest_color=no ${filter:+--gtest_filter=$filter} 2>&1 |
  tee "$out/test_backend_ops.log"
rc=${PIPESTATUS[0]}
log "test_backend_ops exit $rc after $((SECONDS - t0)) s"
# Summary: worst relative error (or mismatch count) per op and type.
printf "%-20s %-9s %6s %14s %s\n" op type cases worst result >"$out/summary.txt"
grep '^\[backend-ops\]' "$out/test_backend_ops.log" | awk '
  $2 == "seed" || $2 == "device" { next }
  { op = $2; ty = $3; st = $NF; val = ""
    for (i = 4; i <= NF; ++i) if ($i ~ /^(rel|mismatches)=/) { split($i, kv, "="); key = kv[1]; val = kv[2] }
    k = op " " ty; if (!(k in worst) || val + 0 > worst[k] + 0) worst[k] = val; kind[k] = key
    n[k]++; if (st != "PASS") fail[k]++ }
  END { for (k in worst) { split(k, p, " ")
          printf "%-20s %-9s %6d %14s %s\n", p[1], p[2], n[k], kind[k] "=" worst[k], (fail[k] ? "FAIL(" fail[k] ")" : "pass") } }' |
  sort >>"$out/summary.txt"
cat "$out/summary.txt"

if [ $bench = 1 ]; then
  log "run $bench_bin"
  timeout "${HS_BENCH_TIMEOUT:-600}" "$bench_bin" ${HS_BENCH_ARGS:-} 2>&1 | tee "$out/bench.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
exit $rc
