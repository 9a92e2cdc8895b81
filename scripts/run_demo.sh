#!/usr/bin/env bash
# The README's run command: the main job on the bundled built-in model (tests/data/tiny, a
# random-weight DeepSeek-V4 of 6 layers made by Hugging Face transformers).
set -euo pipefail
cd "$(dirname "$0")/.."
HS=${1:-build/src/hyperstream}
MODEL=tests/data/tiny
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "== hyperstream inspect $MODEL"
"$HS" inspect "$MODEL"
echo
echo "== hyperstream logits $MODEL (prefill 16 tokens in chunks 5,11)"
echo "0 17 42 99 3 250 7 8 120 64 5 300 12 1 77 200" > "$OUT/tokens.txt"
"$HS" logits "$MODEL" --tokens "$OUT/tokens.txt" --out "$OUT/logits.npy" --chunks 5,11 --top 5
