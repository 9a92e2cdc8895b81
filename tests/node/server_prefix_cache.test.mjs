// The prefix cache seen by clients: an agent transcript of 10+ turns (a tool call per turn, a
// long tool result back each time) grows past 20,000 tokens through the OpenAI and then the
// Anthropic API of one server; from the second turn on every request reports the earlier turns
// as cached (`usage.prompt_tokens_details.cached_tokens`, `usage.cache_read_input_tokens`) and
// computes only what the turn added (the earlier prompt and the answer it got: the snapshot at
// the end of a generation matches the answer as the next request renders it), and the access
// log and /metrics say the same. The Anthropic transcript renders to the same prompts, so it is
// served from what the OpenAI one left. The model's outputs are forced (random weights); the
// prefill of every prompt is real. (Answers with the cache equal those without it:
// tests/test_scheduler_cache.cpp.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

import { startServer, forceHeader, dsmlCalls, MODEL } from './_server.mjs';

let server;
before(async () => {
  server = await startServer(['--ctx-size', '32768', '--test-hooks', '--max-seqs', '2'], { threads: 2, log: 'info' });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0);
});

// Deterministic words (a tool result the model "read").
function words(seed, n) {
  let x = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; ++i) {
    x = (x * 1103515245 + 12345) >>> 0;
    const len = 3 + (x >>> 28);
    let w = '';
    for (let j = 0; j < len; ++j) {
      x = (x * 1103515245 + 12345) >>> 0;
      w += String.fromCharCode(97 + ((x >>> 16) % 26));
    }
    out.push(w);
  }
  return out.join(' ');
}

const READ_TOOL = {
  type: 'function',
  function: {
    name: 'read_file',
    description: 'Read a file of the project',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
};
const SYSTEM = 'You are a coding agent. Read the files you need with read_file, then answer. ' + words(7, 100);
const TASK = 'Find where the configuration is parsed and summarise it.';
const call = (turn) => dsmlCalls([{ name: 'read_file', args: { path: `src/file_${turn}.cpp` } }]);

async function metric(name) {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

test('an OpenAI agent transcript past 20K tokens computes only what each turn adds', async () => {
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: TASK }];
  let prev = null;
  const rows = [];
  for (let turn = 1; ; ++turn) {
    const last = turn >= 10 && prev && prev.prompt_tokens > 20000;
    const r = await client.chat.completions.create(
      { model: MODEL, messages, tools: [READ_TOOL], max_tokens: 400, temperature: 0 },
      { headers: forceHeader(last ? 'The configuration is parsed in src/file_3.cpp.' : call(turn)) },
    );
    const u = r.usage;
    rows.push([turn, u.prompt_tokens, u.prompt_tokens_details.cached_tokens]);
    if (prev) {
      // Everything the previous turn's prompt held is cached (and more: its answer up to EOS).
      assert.ok(u.prompt_tokens_details.cached_tokens >= prev.prompt_tokens, `turn ${turn}: ${JSON.stringify(u)} after ${JSON.stringify(prev)}`);
    }
    if (last) {
      assert.equal(r.choices[0].message.content, 'The configuration is parsed in src/file_3.cpp.');
      break;
    }
    const tc = r.choices[0].message.tool_calls;
    assert.equal(tc.length, 1);
    messages.push({ role: 'assistant', content: null, tool_calls: tc });
    messages.push({ role: 'tool', tool_call_id: tc[0].id, content: words(100 + turn, 180) });
    prev = u;
  }
  console.log('[prefix-cache] openai turns (turn, prompt tokens, cached):', JSON.stringify(rows));
  assert.ok(rows.length >= 10 && rows.at(-1)[1] > 20000);
  // The access log says the same, request by request.
  const log = server.accessLog().filter((l) => l.path === '/v1/chat/completions');
  assert.deepEqual(log.slice(-rows.length).map((l) => [l.prompt_tokens, l.cached_tokens]), rows.map((r) => [r[1], r[2]]));
  assert.ok((await metric('hyperstream_prompt_tokens_cached_total')) >= rows.slice(1).reduce((a, r) => a + r[2], 0));
});

test('the same agent through the Anthropic API: cache_read_input_tokens from the second turn on', async () => {
  const client = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
  const tools = [{ name: 'read_file', description: READ_TOOL.function.description, input_schema: READ_TOOL.function.parameters }];
  const messages = [{ role: 'user', content: TASK }];
  let prevTotal = 0;
  const rows = [];
  for (let turn = 1; turn <= 10; ++turn) {
    const last = turn === 10;
    const m = await client.messages.create(
      { model: MODEL, system: SYSTEM, messages, tools, max_tokens: 400 },
      { headers: forceHeader(last ? 'Done.' : call(turn)) },
    );
    const total = m.usage.input_tokens + m.usage.cache_read_input_tokens;
    rows.push([turn, total, m.usage.cache_read_input_tokens]);
    if (turn > 1) assert.ok(m.usage.cache_read_input_tokens >= prevTotal, `turn ${turn}: ${JSON.stringify(m.usage)}`);
    if (last) break;
    const use = m.content.find((b) => b.type === 'tool_use');
    assert.ok(use, JSON.stringify(m.content));
    messages.push({ role: 'assistant', content: m.content });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: words(100 + turn, 180) }] });
    prevTotal = total;
  }
  console.log('[prefix-cache] anthropic turns (turn, input tokens, cached):', JSON.stringify(rows));
});
