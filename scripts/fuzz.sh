#!/usr/bin/env bash
# Runs the libFuzzer targets of a -DHS_FUZZ=ON build (docs/fuzzing.md):
#   scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]
# For each target (default: every fuzz_* binary in BUILD_DIR/tests/fuzz): libFuzzer first runs
# every input of its seeds (BUILD_DIR/fuzz-corpus/NAME, from `--target fuzz_corpus`), the crash
# inputs kept in tests/fuzz/regressions/NAME and what earlier runs kept in
# BUILD_DIR/fuzz-work/NAME (the regression run), then fuzzes for SECONDS (default 20), keeping
# new inputs in BUILD_DIR/fuzz-work/NAME. A crash, leak, UB report or timeout stops with a
# non-zero status; the input is in BUILD_DIR/fuzz-artifacts. Prints the executions per target.
set -euo pipefail
build=${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]}
seconds=${2:-20}
shift $(( $# >= 2 ? 2 : 1 ))
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$build" && pwd)"
targets=("$@")
if ((${#targets[@]} == 0)); then
  for t in "$build"/tests/fuzz/fuzz_*; do [ -x "$t" ] && targets+=("$(basename "$t")"); done
fi
((${#targets[@]})) || { echo "fuzz.sh: no fuzz_* targets in $build/tests/fuzz (configure with -DHS_FUZZ=ON)" >&2; exit 1; }
mkdir -p "$build/fuzz-artifacts"
# Leaks are findings (libFuzzer checks them per input); a failed huge allocation is an error
# the code must handle, not an abort of the run.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export HS_LOG="${HS_LOG:-error}"  # the parsers' warnings would drown the fuzzer's output
summary=()
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  bin="$build/tests/fuzz/$t"
  seeds="$build/fuzz-corpus/$name"
  kept="$root/tests/fuzz/regressions/$name"
  work="$build/fuzz-work/$name"
  mkdir -p "$work" "$seeds"
  dirs=("$seeds")
  [ -d "$kept" ] && dirs+=("$kept")
  echo "== $t: the inputs of $work ${dirs[*]}, then fuzzing for ${seconds}s"
  log="$build/fuzz-artifacts/$name.log"
  "$bin" -rss_limit_mb=4096 -timeout=30 -artifact_prefix="$build/fuzz-artifacts/$name-" -print_final_stats=1 \
    -max_total_time="$seconds" "$work" "${dirs[@]}" 2>"$log" || { tail -60 "$log"; exit 1; }
  replayed=$(sed -n 's/^#\([0-9]*\)[[:space:]]*INITED.*/\1/p' "$log" | head -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  summary+=("$t: ${replayed:-?} runs over the kept inputs, ${execs:-?} executions in ${seconds}s, ${cov:-cov: ?}, corpus $(ls "$work" | wc -l) kept")
done
printf '%s\n' "${summary[@]}"
