// What coding agents send on the chat and messages routes, through the official SDKs: any model
// name (and aliases, /v1/models in Anthropic's shape), system messages inside an Anthropic
// conversation, each API's context-overflow wording and --clamp-max-tokens, thinking budgets,
// signed (and omitted) thinking, output_config effort and formats, image blocks.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

import { startServer, post, forceHeader, WEATHER_TOOL_ANTHROPIC, MODEL } from './_server.mjs';

let server, anthropic, openai;
const user = (content) => [{ role: 'user', content }];
const force = (text) => ({ headers: forceHeader(text) });

before(async () => {
  server = await startServer(['--ctx-size', '2048', '--test-hooks', '--model-alias', 'claude-sonnet-4-5', '--model-alias', 'ds4']);
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
});

test('model names: any name is served and answered with the served id; aliases are listed', async () => {
  const m = await anthropic.messages.create({ model: 'claude-opus-5-5', max_tokens: 20, messages: user('hi') }, force('Hi.'));
  assert.equal(m.model, MODEL);
  const c = await openai.chat.completions.create({ model: 'gpt-4.1', messages: user('hi'), max_tokens: 5 }, force('Hi.'));
  assert.equal(c.model, MODEL);
  const list = await openai.models.list();
  assert.deepEqual(list.data.map((x) => x.id), [MODEL, 'claude-sonnet-4-5', 'ds4']);
  assert.equal((await openai.models.retrieve('ds4')).id, 'ds4');
  await assert.rejects(openai.models.retrieve('gpt-9'), (e) => e.status === 404);
  // The Anthropic SDK sends anthropic-version: the Anthropic shape.
  const al = await anthropic.models.list();
  assert.deepEqual(al.data.map((x) => x.id), [MODEL, 'claude-sonnet-4-5', 'ds4']);
  for (const x of al.data) {
    assert.equal(x.type, 'model');
    assert.equal(x.display_name, x.id);
    assert.ok(!Number.isNaN(Date.parse(x.created_at)));
  }
  assert.equal((await anthropic.models.retrieve('claude-sonnet-4-5')).type, 'model');

  const strict = await startServer(['--strict-model-name', '--model-alias', 'claude-sonnet-4-5']);
  try {
    const c2 = new Anthropic({ baseURL: strict.url, apiKey: 'unused', maxRetries: 0 });
    const ok = await c2.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 3, messages: user('hi') });
    assert.equal(ok.model, MODEL);
    await assert.rejects(c2.messages.create({ model: 'claude-opus-5-5', max_tokens: 3, messages: user('hi') }), (e) => e.status === 404);
  } finally {
    await strict.stop();
  }
});

test('system messages inside an Anthropic conversation render where they stand, as on the chat route', async () => {
  const messages = [
    { role: 'user', content: [{ type: 'text', text: 'Fix the bug.' }] },
    { role: 'system', content: [{ type: 'text', text: '# Environment\ncwd: /work', cache_control: { type: 'ephemeral' } }] },
  ];
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 20, system: 'You are an agent.', messages }, force('On it.'));
  assert.deepEqual(m.content, [{ type: 'text', text: 'On it.' }]);
  const count = await anthropic.messages.countTokens({ model: MODEL, system: 'You are an agent.', messages });
  const chat = await post(server, '/tokenize', {
    messages: [{ role: 'system', content: 'You are an agent.' }, { role: 'user', content: 'Fix the bug.' }, { role: 'system', content: '# Environment\ncwd: /work' }],
    return_token_strs: true,
  });
  assert.equal(count.input_tokens, chat.body.count);
  // Ending with a system message, the prompt still ends with the generation prompt.
  assert.deepEqual(chat.body.token_strs.slice(-2), ['<｜Assistant｜>', '</think>']);
  const before = await anthropic.messages.countTokens({ model: MODEL, system: 'You are an agent.', messages: messages.slice(0, 1) });
  assert.ok(count.input_tokens > before.input_tokens + 5);
});

test('context overflow: Anthropic wording (which Claude Code parses), OpenAI wording and code; --clamp-max-tokens', async () => {
  const n = (await anthropic.messages.countTokens({ model: MODEL, messages: user('hi') })).input_tokens;
  await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 5000, messages: user('hi') }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.equal(e.error.error.message, `input length and \`max_tokens\` exceed context limit: ${n} + 5000 > 2048, decrease input length or \`max_tokens\` and try again`);
    return true;
  });
  await assert.rejects(openai.chat.completions.create({ model: MODEL, max_tokens: 32000, messages: user('hi') }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.code, 'context_length_exceeded');
    assert.match(e.message, /maximum context length is 2048 tokens\. However, you requested \d+ tokens \(\d+ in the messages, 32000 in the completion\)/);
    return true;
  });
  const clamp = await startServer(['--ctx-size', '2048', '--clamp-max-tokens']);
  try {
    const c = new Anthropic({ baseURL: clamp.url, apiKey: 'unused', maxRetries: 0 });
    const m = await c.messages.create({ model: MODEL, max_tokens: 5000, messages: user('hi'), ignore_eos: true, temperature: 0 });
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 2048 - m.usage.input_tokens);
  } finally {
    await clamp.stop();
  }
});

test('thinking: budget_tokens = max_tokens accepted, the budget ends the reasoning, signatures and signature_delta', async () => {
  const reasoning = 'one two three four five six seven eight nine ten eleven twelve';
  const long = force(reasoning); // no </think>: all reasoning unless the budget cuts it
  const free = await anthropic.messages.create({ model: MODEL, max_tokens: 200, thinking: { type: 'enabled', budget_tokens: 200 }, messages: user('count') }, long);
  assert.deepEqual(free.content.map((b) => b.type), ['thinking']);
  assert.equal(free.content[0].thinking, reasoning);
  const cut = await anthropic.messages.create({ model: MODEL, max_tokens: 200, thinking: { type: 'enabled', budget_tokens: 4 }, messages: user('count') }, long);
  assert.deepEqual(cut.content.map((b) => b.type), ['thinking', 'text']);
  assert.ok(reasoning.startsWith(cut.content[0].thinking) && cut.content[0].thinking.length < reasoning.length, cut.content[0].thinking);
  assert.ok(reasoning.endsWith(cut.content[1].text.trimStart().slice(-10)), cut.content[1].text);
  // Every thinking block is signed; the stream sends the signature in a signature_delta.
  assert.ok(free.content[0].signature.length > 10);
  const s = anthropic.messages.stream({ model: MODEL, max_tokens: 100, thinking: { type: 'enabled', budget_tokens: 50 }, messages: user('2+2') }, force('Two and two.</think>4'));
  const deltas = [];
  s.on('streamEvent', (e) => e.type === 'content_block_delta' && deltas.push(e.delta.type));
  const final = await s.finalMessage();
  // (Batching decides how many deltas of a kind there are.)
  assert.deepEqual(deltas.filter((d, i) => d !== deltas[i - 1]), ['thinking_delta', 'signature_delta', 'text_delta']);
  assert.equal(final.content[0].thinking, 'Two and two.');
  assert.ok(final.content[0].signature.length > 10);
  const whole = await anthropic.messages.create({ model: MODEL, max_tokens: 100, thinking: { type: 'enabled', budget_tokens: 50 }, messages: user('2+2') }, force('Two and two.</think>4'));
  assert.equal(final.content[0].signature, whole.content[0].signature);
});

test('thinking display "omitted": empty thinking text, and the block sent back restores the reasoning', async () => {
  const body = { model: MODEL, max_tokens: 100, thinking: { type: 'adaptive', display: 'omitted' }, messages: user('2+2'), tools: [WEATHER_TOOL_ANTHROPIC] };
  const m = await anthropic.messages.create(body, force('Two and two.</think>4'));
  assert.equal(m.content[0].type, 'thinking');
  assert.equal(m.content[0].thinking, '');
  const s = await anthropic.messages.stream(body, force('Two and two.</think>4')).finalMessage();
  assert.equal(s.content[0].thinking, '');
  assert.equal(s.content[0].signature, m.content[0].signature);
  // With tools the model keeps earlier reasoning in its prompt: the omitted block counts as the text.
  const turn = (content) => ({ ...body, messages: [...body.messages, { role: 'assistant', content }, { role: 'user', content: 'and 3+3?' }] });
  const omitted = await anthropic.messages.countTokens(turn(m.content));
  const shown = await anthropic.messages.countTokens(turn([{ type: 'thinking', thinking: 'Two and two.', signature: 'x' }, m.content[1]]));
  const none = await anthropic.messages.countTokens(turn([m.content[1]]));
  assert.equal(omitted.input_tokens, shown.input_tokens);
  assert.ok(omitted.input_tokens > none.input_tokens);
});

test('output_config: effort follows the effort table; formats and a forced tool are accepted and shown to the model', async () => {
  const count = async (extra) =>
    (await anthropic.messages.countTokens({ model: MODEL, messages: user('hi'), thinking: { type: 'adaptive' }, ...extra })).input_tokens;
  const base = await count({});
  assert.equal(await count({ output_config: { effort: 'high' } }), base); // v4: "high" adds no text
  assert.ok((await count({ output_config: { effort: 'max' } })) > base + 20); // the "absolute maximum" text
  const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
  assert.ok((await count({ output_config: { format: { type: 'json_schema', schema } } })) > base + 10);
  assert.equal(await count({ output_format: { type: 'json_schema', schema } }), await count({ output_config: { format: { type: 'json_schema', schema } } }));
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 20, messages: user('n?'), output_config: { format: { type: 'json_schema', schema } } }, force('{"n": 4}'));
  assert.deepEqual(JSON.parse(m.content[0].text), { n: 4 });
  const forced = await anthropic.messages.create(
    { model: MODEL, max_tokens: 20, messages: user('x'), tools: [WEATHER_TOOL_ANTHROPIC], tool_choice: { type: 'tool', name: 'get_weather' } },
    force('ok'),
  );
  assert.equal(forced.stop_reason, 'end_turn');
  const chat = await openai.chat.completions.create(
    { model: MODEL, messages: user('n?'), response_format: { type: 'json_schema', json_schema: { name: 'n', schema, strict: true } } },
    force('{"n": 4}'),
  );
  assert.deepEqual(JSON.parse(chat.choices[0].message.content), { n: 4 });
});

test('image and document blocks become placeholder text (the model reads text only)', async () => {
  const img = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } };
  const doc = { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' } };
  const messages = [{ role: 'user', content: [{ type: 'text', text: 'Look:' }, img] }];
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 20, messages }, force('A picture.'));
  assert.equal(m.content[0].text, 'A picture.');
  const a = await anthropic.messages.countTokens({ model: MODEL, messages });
  const b = await anthropic.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: 'Look:' }, { type: 'text', text: '[Unsupported image]' }] }] });
  assert.equal(a.input_tokens, b.input_tokens);
  // Inside a tool result (a screenshot a tool returned) as well.
  const withResult = await anthropic.messages.countTokens({
    model: MODEL,
    tools: [WEATHER_TOOL_ANTHROPIC],
    messages: [
      { role: 'user', content: 'w?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'get_weather', input: { location: 'x' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [doc] }] },
    ],
  });
  assert.ok(withResult.input_tokens > 0);
});
