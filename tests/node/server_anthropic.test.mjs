// The Anthropic Messages API of `hyperstream serve` driven by the official @anthropic-ai/sdk
// (and raw HTTP for the exact event sequence), on the built-in model with forced outputs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

import { startServer, post, forceHeader, dsmlCalls, parseSse, WEATHER_TOOL_ANTHROPIC, MODEL } from './_server.mjs';

let server;
let client;
const user = (content) => [{ role: 'user', content }];

before(async () => {
  server = await startServer(['--ctx-size', '2048', '--test-force-output', 'Hi! I am the built-in model.']);
  client = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0);
});

test('non-stream message: text block, end_turn, usage', async () => {
  const m = await client.messages.create({ model: MODEL, max_tokens: 100, messages: user('Hello') });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.model, MODEL);
  assert.deepEqual(m.content, [{ type: 'text', text: 'Hi! I am the built-in model.' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  const count = await client.messages.countTokens({ model: MODEL, messages: user('Hello') });
  // Anthropic counts the cached part apart: input_tokens are the computed ones.
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, count.input_tokens);
  assert.ok(m.usage.output_tokens > 5);
});

test('stream: the SDK accumulates the same message; events in the documented order', async () => {
  const stream = client.messages.stream({ model: MODEL, max_tokens: 100, messages: user('Hello') });
  const kinds = [];
  stream.on('streamEvent', (e) => kinds.push(e.type));
  const final = await stream.finalMessage();
  assert.deepEqual(final.content, [{ type: 'text', text: 'Hi! I am the built-in model.' }]);
  assert.equal(final.stop_reason, 'end_turn');
  assert.ok(final.usage.output_tokens > 5);
  assert.equal(kinds[0], 'message_start');
  assert.equal(kinds[1], 'content_block_start');
  assert.equal(kinds.at(-3), 'content_block_stop');
  assert.equal(kinds.at(-2), 'message_delta');
  assert.equal(kinds.at(-1), 'message_stop');
  assert.ok(kinds.slice(2, -3).every((k) => k === 'content_block_delta'));

  // Raw wire: "event:" names match the data's type.
  const r = await fetch(`${server.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: MODEL, max_tokens: 100, messages: user('Hello'), stream: true }),
  });
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const events = parseSse(await r.text());
  for (const e of events) assert.equal(e.event, e.data.type);
  assert.deepEqual(events[0].data.message.content, []);
  // message_start is sent before the prefix cache is asked: it counts the whole prompt; the final
  // usage splits it into computed and cached tokens.
  assert.equal(events[0].data.message.usage.input_tokens, final.usage.input_tokens + final.usage.cache_read_input_tokens);
});

test('thinking: thinking block then text block (stream and non-stream)', async () => {
  const opts = { headers: forceHeader('Two plus two.</think>It is 4.') };
  const body = { model: MODEL, max_tokens: 200, messages: user('2+2?'), thinking: { type: 'enabled', budget_tokens: 100 } };
  const m = await client.messages.create(body, opts);
  assert.equal(m.content.length, 2);
  assert.equal(m.content[0].type, 'thinking');
  assert.equal(m.content[0].thinking, 'Two plus two.');
  assert.deepEqual(m.content[1], { type: 'text', text: 'It is 4.' });
  const s = client.messages.stream(body, opts);
  const final = await s.finalMessage();
  assert.equal(final.content[0].thinking, 'Two plus two.');
  assert.equal(final.content[1].text, 'It is 4.');
  // Without thinking the same output is all text (chat mode: no reasoning to split off).
  const plain = await client.messages.create({ ...body, thinking: { type: 'disabled' } }, opts);
  assert.equal(plain.content.length, 1);
  assert.equal(plain.content[0].text, 'Two plus two.</think>It is 4.');
});

test('tool_use blocks from DSML; tool_result goes back in', async () => {
  const forced = 'Checking.' + dsmlCalls([{ name: 'get_weather', args: { location: 'Oslo', days: 2 } }]);
  const opts = { headers: forceHeader(forced) };
  const body = { model: MODEL, max_tokens: 300, tools: [WEATHER_TOOL_ANTHROPIC], messages: user('Weather in Oslo?') };
  const m = await client.messages.create(body, opts);
  assert.equal(m.stop_reason, 'tool_use');
  assert.equal(m.content.length, 2);
  assert.deepEqual(m.content[0], { type: 'text', text: 'Checking.' });
  const tu = m.content[1];
  assert.equal(tu.type, 'tool_use');
  assert.match(tu.id, /^toolu_[A-Za-z0-9]{24}$/);
  assert.equal(tu.name, 'get_weather');
  assert.deepEqual(tu.input, { location: 'Oslo', days: 2 });

  const s = client.messages.stream(body, opts);
  const final = await s.finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  assert.deepEqual(final.content[1].input, { location: 'Oslo', days: 2 });
  assert.equal(final.content[1].name, 'get_weather');

  const next = await client.messages.create(
    {
      ...body,
      messages: [
        ...body.messages,
        { role: 'assistant', content: m.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'sunny, 12C' }, { type: 'text', text: 'Thanks' }] },
      ],
    },
    { headers: forceHeader('It is sunny.') },
  );
  assert.equal(next.stop_reason, 'end_turn');
  assert.equal(next.content[0].text, 'It is sunny.');
  // The tool result and the call are in the prompt.
  const withResult = await client.messages.countTokens({ model: MODEL, tools: body.tools, messages: [
    ...body.messages, { role: 'assistant', content: m.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'sunny, 12C' }] }] });
  const without = await client.messages.countTokens({ model: MODEL, tools: body.tools, messages: body.messages });
  assert.ok(withResult.input_tokens > without.input_tokens + 10);
});

test('stop_sequences: stop_reason stop_sequence, the sequence is reported, not emitted', async () => {
  const opts = { headers: forceHeader('alpha beta gamma delta') };
  const m = await client.messages.create({ model: MODEL, max_tokens: 100, messages: user('x'), stop_sequences: ['gamma', 'zeta'] }, opts);
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, 'gamma');
  assert.equal(m.content[0].text, 'alpha beta ');
  const s = client.messages.stream({ model: MODEL, max_tokens: 100, messages: user('x'), stop_sequences: ['a be'] }, opts);
  const final = await s.finalMessage();
  assert.equal(final.stop_reason, 'stop_sequence');
  assert.equal(final.stop_sequence, 'a be');
  assert.equal(final.content[0].text, 'alph');
});

test('max_tokens: stop_reason max_tokens with exactly max_tokens output tokens', async () => {
  const m = await client.messages.create(
    { model: MODEL, max_tokens: 4, messages: user('x') },
    { headers: forceHeader('one two three four five six seven eight') },
  );
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 4);
});

test('system prompt (string and blocks) and multi-turn history render', async () => {
  const a = await client.messages.countTokens({ model: MODEL, system: 'Be brief.', messages: user('Hi') });
  const b = await client.messages.countTokens({ model: MODEL, system: [{ type: 'text', text: 'Be brief.' }], messages: user('Hi') });
  const c = await client.messages.countTokens({ model: MODEL, messages: user('Hi') });
  assert.equal(a.input_tokens, b.input_tokens);
  assert.ok(a.input_tokens > c.input_tokens);
  const r = await client.messages.create(
    {
      model: MODEL,
      max_tokens: 50,
      system: 'Be brief.',
      messages: [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: [{ type: 'text', text: 'Hello!' }] },
        { role: 'user', content: 'How are you?' },
      ],
    },
    { headers: forceHeader('Fine.') },
  );
  assert.equal(r.content[0].text, 'Fine.');
});

test('sampled (unforced) answers from the real model work in both modes', async () => {
  const free = await startServer();
  try {
    const c = new Anthropic({ baseURL: free.url, apiKey: 'x', maxRetries: 0 });
    const body = { model: MODEL, max_tokens: 8, messages: user('Tell me a story'), temperature: 0 };
    const m = await c.messages.create(body);
    const s = await c.messages.stream(body).finalMessage();
    assert.deepEqual(s.content, m.content);
    assert.equal(s.stop_reason, m.stop_reason);
    assert.deepEqual(s.usage.output_tokens, m.usage.output_tokens);
    const r = await post(free, '/v1/messages', { ...body, top_k: 5, top_p: 0.9, temperature: 0.7 });
    assert.equal(r.status, 200);
  } finally {
    await free.stop();
  }
});
