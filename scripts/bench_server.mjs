#!/usr/bin/env node
// Aggregate decode throughput of a running `hyperstream serve` at several concurrency levels:
// N concurrent greedy chat requests of --max-tokens tokens each (ignore_eos), wall-clock timed.
//   node scripts/bench_server.mjs [--url http://127.0.0.1:8000] [--streams 1,8,16] [--max-tokens 256]
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const url = args.url ?? 'http://127.0.0.1:8000';
const levels = (args.streams ?? '1,8,16').split(',').map(Number);
const maxTokens = Number(args['max-tokens'] ?? 256);

async function one(i) {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: `Request ${i}: tell me a story.` }],
      max_tokens: maxTokens, temperature: 0, ignore_eos: true,
    }),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  return (await r.json()).usage.completion_tokens;
}

console.log('| concurrent streams | aggregate tok/s | per stream tok/s |');
console.log('|---|---|---|');
for (const n of levels) {
  const t0 = performance.now();
  const tokens = (await Promise.all(Array.from({ length: n }, (_, i) => one(i)))).reduce((a, b) => a + b, 0);
  const s = (performance.now() - t0) / 1000;
  console.log(`| ${n} | ${(tokens / s).toFixed(0)} | ${(tokens / s / n).toFixed(0)} |`);
}
