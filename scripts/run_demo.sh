#!/usr/bin/env bash
# The README's run command: the main job on the bundled models. First the engine on
# tests/data/tiny (a random-weight DeepSeek-V4 of 6 layers made by Hugging Face transformers),
# then `hyperstream serve` on the built-in synthetic model answering one chat request over HTTP
# (the client is node, which scripts/setup.sh installs), and a clean stop.
set -euo pipefail
cd "$(dirname "$0")/.."
HS=${1:-build/src/hyperstream}
MODEL=tests/data/tiny
OUT=$(mktemp -d)
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true; fi
  rm -rf "$OUT"
}
trap cleanup EXIT

echo "== hyperstream inspect $MODEL"
"$HS" inspect "$MODEL"
echo
echo "== hyperstream logits $MODEL (prefill 16 tokens in chunks 5,11)"
echo "0 17 42 99 3 250 7 8 120 64 5 300 12 1 77 200" > "$OUT/tokens.txt"
"$HS" logits "$MODEL" --tokens "$OUT/tokens.txt" --out "$OUT/logits.npy" --chunks 5,11 --top 5

echo
echo "== hyperstream serve (built-in model) + one chat request"
"$HS" serve --port 0 2> "$OUT/serve.log" &
SERVER_PID=$!
PORT=
for _ in $(seq 1 300); do
  PORT=$(sed -n 's|.*listening on http://[^:]*:\([0-9]*\).*|\1|p' "$OUT/serve.log" | head -n 1)
  [ -n "$PORT" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$OUT/serve.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$PORT" ] || { echo "the server did not start" >&2; cat "$OUT/serve.log" >&2; exit 1; }

node --input-type=module - "http://127.0.0.1:$PORT" <<'EOF'
const base = process.argv[2];
for (let i = 0; ; ++i) {  // wait until the model is loaded
  const r = await fetch(`${base}/health`).catch(() => null);
  if (r?.status === 200) break;
  if (i > 600) throw new Error('the server never became ready');
  await new Promise((r) => setTimeout(r, 100));
}
const request = {
  messages: [{ role: 'user', content: 'Hello! Who are you?' }],
  max_tokens: 32,
  temperature: 0,
};
console.log(`POST ${base}/v1/chat/completions ${JSON.stringify(request)}`);
const r = await fetch(`${base}/v1/chat/completions`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(request),
});
const body = await r.json();
if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${JSON.stringify(body)}`);
const c = body.choices[0];
console.log(`model ${body.model}, finish_reason ${c.finish_reason}, usage ${JSON.stringify(body.usage)}`);
console.log(`answer (random weights, so random text): ${JSON.stringify(c.message.content)}`);
EOF

kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
echo "server stopped cleanly (exit $?)"
SERVER_PID=
