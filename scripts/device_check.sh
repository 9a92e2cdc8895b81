#!/usr/bin/env bash
# On the GPU lease machine: runs the GPU tests from binaries packed by
# scripts/pack_device_binaries.sh (carry build-cuda/devgz), one log per binary under $OUT, and
# prints a summary line per binary plus the lines the tests print for the record
# ([cuda-parity], [pipeline-gpu], [batch-gpu], [device-scratch], [split-generate], ...).
#
#   scripts/device_check.sh [test ...]   (default: every packed test_* binary)
# With two GPUs the cuda:0,cuda:1 cases run too (NCCL_NVLS_ENABLE=0: no NVLink multicast).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
d=${HS_DEVGZ:-build-cuda/devgz}
out=${OUT:-/tmp/device_check}
mkdir -p "$out"
run=scripts/run_device_binaries.sh
export NCCL_NVLS_ENABLE=0
"$run" hyperstream --version >/dev/null 2>&1 || true  # unpacks the binaries once
export HS_CLI=$root/$d/hyperstream   # the CLI-driving tests (2-process pipeline) run the packed binary
export LD_LIBRARY_PATH="$root/$d/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  for f in "$d"/test_*; do tests+=("$(basename "$f")"); done
fi
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
status=0
for t in "${tests[@]}"; do
  start=$(date +%s)
  timeout "${HS_TEST_TIMEOUT:-240}" "$run" "$t" >"$out/$t.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  sum=$(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \] [0-9]+ test' "$out/$t.log" | tr -s ' ' | tr '\n' ' ')
  echo "== $t rc=$rc $(( $(date +%s) - start ))s: $sum"
  grep -E '^\[(cuda-graph|cuda-parity|cuda-model|pipeline-gpu|batch-gpu|device-scratch|split-generate|device-sampling|dist)' \
    "$out/$t.log" | head -60
  grep -E '^\[  FAILED  \]|Failure|error:' "$out/$t.log" | head -10
done
exit $status
