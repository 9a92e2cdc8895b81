#!/usr/bin/env bash
# The cost of speculative decoding when drafts fail (issue 16; docs/server.md): on the GPU
# machine, one `serve` per --draft value on a synthetic model (random weights: drafts are never
# accepted) and scripts/bench_server.py against it; aggregate tok/s per concurrency level, the
# server's draft counters and any warning it logged. Binaries from scripts/pack_device_binaries.sh.
#
#   scripts/bench_draft_cost.sh [--layers N] [--quant MIX] [--streams 1,8] [--reps N] [DRAFT ...]
#   (defaults: 8 layers, q2, 1,8 streams, 2 reps, drafts: off mtp dspark; results under $OUT or /tmp/bench_draft_cost)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
layers=8 quant=q2 streams=1,8 reps=2 drafts=()
while [ $# -gt 0 ]; do
  case $1 in
    --layers) layers=$2; shift 2 ;;
    --quant) quant=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) drafts+=("$1"); shift ;;
  esac
done
[ ${#drafts[@]} -gt 0 ] || drafts=(off mtp dspark)
out=${OUT:-/tmp/bench_draft_cost}
mkdir -p "$out"
run=scripts/run_device_binaries.sh
for rep in $(seq 1 "$reps"); do
  for d in "${drafts[@]}"; do
    echo "== --draft $d, run $rep"
    log=$out/serve_${d}_$rep.log
    "$run" hyperstream serve --synthetic flash --layers "$layers" --quant "$quant" --device cuda:0 --max-seqs 8 \
      --prefix-cache off --draft "$d" --port 8100 >"$log" 2>&1 &
    pid=$!
    python3 scripts/bench_server.py --url http://127.0.0.1:8100 --streams "$streams" --max-tokens 256 --wait 180 \
      --json "$out/bench_${d}_$rep.json" --label "serve --draft $d" 2>&1 | tail -n +2
    python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8100/metrics").read().decode())' \
      2>/dev/null | grep -E '^hyperstream_(draft|decode_graph_replays)' | head -8
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    grep -v '"type":"access"' "$log" | grep -E 'warn|error|terminate' | grep -v DSML | tail -4 | cut -c1-400
  done
done
