// State isolation of the continuous-batching server: concurrent greedy requests answer exactly
// what each answers alone, repeated requests give the same bytes, and `hyperstream run` prints
// the same text as the server for the same prompt.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, post, runCli, metric, until } from './_server.mjs';

let server;
before(async () => {
  server = await startServer(['--max-seqs', '16', '--prefill-chunk', '7']);
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
});

const PROMPTS = Array.from({ length: 16 }, (_, i) =>
  `Request ${i}: ${'tell me about the number '.repeat(1 + (i % 5))}${i * 7919}`,
);
const ask = (prompt, extra = {}) =>
  post(server, '/v1/chat/completions', {
    messages: [{ role: 'user', content: prompt }],
    max_tokens: 24,
    temperature: 0,
    ...extra,
  });

test('16 concurrent greedy requests return exactly what each returns alone', async () => {
  const alone = [];
  for (const p of PROMPTS) {
    const r = await ask(p);
    assert.equal(r.status, 200);
    alone.push(r.body.choices[0].message.content);
  }
  assert.ok(new Set(alone).size > 8, 'different prompts should give different answers');
  for (let round = 0; round < 2; ++round) {
    const together = await Promise.all(PROMPTS.map((p) => ask(p)));
    together.forEach((r, i) => {
      assert.equal(r.status, 200);
      assert.equal(r.body.choices[0].message.content, alone[i], `prompt ${i}, round ${round}`);
    });
  }
  // Mixed streaming and non-streaming, different lengths, at once.
  const mixed = await Promise.all(
    PROMPTS.map(async (p, i) => {
      if (i % 2) return (await ask(p)).body.choices[0].message.content;
      const r = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: p }], max_tokens: 24, temperature: 0, stream: true }),
      });
      let text = '';
      for (const line of (await r.text()).split('\n'))
        if (line.startsWith('data: {')) text += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? '';
      return text;
    }),
  );
  assert.deepEqual(mixed, alone);
  await until(async () => (await metric(server, 'hyperstream_requests_running')) === 0, 5000, 'slots to free');
});

test('the same prompt 5 times in a row gives the same bytes', async () => {
  const bodies = [];
  for (let i = 0; i < 5; ++i) {
    const r = await ask('Repeat after me: determinism', { max_tokens: 32 });
    // (The cached part of the prompt grows after the first: the prefix cache; the rest is equal.)
    const { prompt_tokens_details, ...u } = r.body.usage;
    assert.ok(prompt_tokens_details.cached_tokens <= u.prompt_tokens);
    bodies.push(JSON.stringify({ c: r.body.choices[0], u }));
  }
  assert.equal(new Set(bodies).size, 1);
});

test('hyperstream run prints the same text as the server (chat and raw)', async () => {
  const prompt = 'What is the capital of France?';
  const srv = await ask(prompt, { max_tokens: 20 });
  const cli = await runCli(['run', '-p', prompt, '--max-tokens', '20', '--temperature', '0', '--threads', '1']);
  assert.equal(cli.code, 0, cli.stderr);
  assert.equal(cli.stdout, srv.body.choices[0].message.content + '\n');

  const raw = await post(server, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  const cliRaw = await runCli(['run', '--raw', '-p', 'Once upon a time', '--max-tokens', '12', '--temperature', '0']);
  assert.equal(cliRaw.code, 0, cliRaw.stderr);
  assert.equal(cliRaw.stdout, raw.body.choices[0].text + '\n');
});
