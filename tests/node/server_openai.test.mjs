// The OpenAI-compatible API of `hyperstream serve` driven by the official openai SDK (and raw
// HTTP where the wire format itself is checked), on the built-in model. Answers that need a
// particular model output (tool calls, stop sequences) force it with the test-only hook.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { startServer, post, forceHeader, dsmlCalls, parseSse, WEATHER_TOOL_OPENAI, MODEL } from './_server.mjs';

let server;
let client;
const user = (content) => [{ role: 'user', content }];

before(async () => {
  server = await startServer(['--ctx-size', '2048', '--test-force-output', 'Hello from the forced output.']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0);
});

// Requests that should sample use the real model: an empty header text means "no forcing"
// is not available, so those go through a second server without the hook.
let free;
let freeClient;
before(async () => {
  free = await startServer();
  freeClient = new OpenAI({ baseURL: `${free.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  await free.stop();
});

test('models list names the served model', async () => {
  const page = await freeClient.models.list();
  assert.deepEqual(
    page.data.map((m) => m.id),
    [MODEL],
  );
  const one = await freeClient.models.retrieve(MODEL);
  assert.equal(one.id, MODEL);
  await assert.rejects(freeClient.models.retrieve('nope'), (e) => e.status === 404);
});

test('non-stream chat: content, usage, finish_reason length at max_tokens', async () => {
  const r = await freeClient.chat.completions.create({
    model: MODEL,
    messages: user('Hello there'),
    max_tokens: 7,
    temperature: 0,
    ignore_eos: true,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 7);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 7);
  // /tokenize of the same messages gives the prompt length usage reports.
  const t = await post(free, '/tokenize', { messages: user('Hello there') });
  assert.equal(t.status, 200);
  assert.equal(t.body.count, r.usage.prompt_tokens);
});

test('stream chat equals non-stream chat (greedy), with include_usage', async () => {
  const body = { model: MODEL, messages: user('Stream me'), max_tokens: 12, temperature: 0 };
  const whole = await freeClient.chat.completions.create(body);
  const stream = await freeClient.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let first = true;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.id.startsWith('chatcmpl-'), true);
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    if (first) assert.equal(chunk.choices[0].delta.role, 'assistant');
    first = false;
    text += chunk.choices[0].delta.content ?? '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  // The same except for the prompt's cached part (the second request finds the first's prefix).
  const strip = ({ prompt_tokens_details, ...u }) => u;
  assert.deepEqual(strip(usage), strip(whole.usage));
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0);
});

test('raw SSE framing: data lines, a usage chunk with empty choices, [DONE] last', async () => {
  const r = await fetch(`${free.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: user('hi'), max_tokens: 3, stream: true, stream_options: { include_usage: true } }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const events = parseSse(await r.text());
  assert.equal(events.at(-1).data, '[DONE]');
  const usage = events.at(-2).data;
  assert.deepEqual(usage.choices, []);
  assert.equal(usage.usage.completion_tokens <= 3, true);
  for (const e of events.slice(0, -2)) assert.equal(e.data.usage, null);
});

test('logprobs: one entry per token with top_logprobs alternatives', async () => {
  const r = await freeClient.chat.completions.create({
    model: MODEL,
    messages: user('logprobs please'),
    max_tokens: 5,
    temperature: 0,
    ignore_eos: true,
    logprobs: true,
    top_logprobs: 3,
  });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 5);
  for (const e of lp) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.ok(Array.isArray(e.bytes));
    assert.equal(e.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  }
  assert.equal(lp.map((e) => e.token).join(''), r.choices[0].message.content);
  // Streamed: the same entries, spread over the chunks.
  const stream = await freeClient.chat.completions.create({
    model: MODEL, messages: user('logprobs please'), max_tokens: 5, temperature: 0, ignore_eos: true,
    logprobs: true, top_logprobs: 3, stream: true,
  });
  const streamed = [];
  for await (const c of stream) if (c.choices[0]?.logprobs?.content) streamed.push(...c.choices[0].logprobs.content);
  assert.deepEqual(streamed, lp);
  const none = await freeClient.chat.completions.create({ model: MODEL, messages: user('x'), max_tokens: 2 });
  assert.equal(none.choices[0].logprobs, null);
});

test('seeded sampling is reproducible', async () => {
  const body = { model: MODEL, messages: user('seed'), max_tokens: 16, temperature: 1, seed: 1234, top_p: 0.95, top_k: 40 };
  const a = await freeClient.chat.completions.create(body);
  const b = await freeClient.chat.completions.create(body);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test('forced output comes back verbatim, finish_reason stop at EOS', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: user('anything'), max_tokens: 100 });
  assert.equal(r.choices[0].message.content, 'Hello from the forced output.');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].message.reasoning_content ?? null, null);
});

test('stop sequences: text-level, across token boundaries, never emitted', async () => {
  const text = 'The quick brown fox jumps over the lazy dog';
  const opts = { headers: forceHeader(text) };
  const cases = [
    [['fox'], 'The quick brown '],
    [['k br'], 'The quic'], // spans the tokens "quick" and " brown"
    [['zzz', 'over'], 'The quick brown fox jumps '],
    ['dog', 'The quick brown fox jumps over the lazy '],
    [['nothing'], text],
  ];
  for (const [stop, want] of cases) {
    const r = await client.chat.completions.create({ model: MODEL, messages: user('q'), max_tokens: 100, stop }, opts);
    assert.equal(r.choices[0].message.content, want, `stop ${JSON.stringify(stop)}`);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await client.chat.completions.create(
      { model: MODEL, messages: user('q'), max_tokens: 100, stop, stream: true },
      opts,
    );
    let streamed = '';
    for await (const c of s) streamed += c.choices[0]?.delta?.content ?? '';
    assert.equal(streamed, want, `streamed, stop ${JSON.stringify(stop)}`);
  }
});

test('max_tokens cuts the forced text: finish_reason length, usage counts', async () => {
  const r = await client.chat.completions.create(
    { model: MODEL, messages: user('q'), max_completion_tokens: 3 },
    { headers: forceHeader('one two three four five six seven') },
  );
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 3);
  assert.ok('one two three four five six seven'.startsWith(r.choices[0].message.content));
});

test('DSML tool calls come back as OpenAI tool_calls (stream and non-stream)', async () => {
  const dsml = 'Let me check.' + dsmlCalls([
    { name: 'get_weather', args: { location: 'Paris', days: 3 } },
    { name: 'get_weather', args: { location: 'Tōkyō' } },
  ]);
  const body = { model: MODEL, messages: user('Weather in Paris and Tokyo?'), tools: [WEATHER_TOOL_OPENAI], max_tokens: 200 };
  const opts = { headers: forceHeader(dsml) };
  const r = await client.chat.completions.create(body, opts);
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, 'Let me check.');
  assert.equal(c.message.tool_calls.length, 2);
  const [a, b] = c.message.tool_calls;
  assert.match(a.id, /^call_[A-Za-z0-9]{24}$/);
  assert.notEqual(a.id, b.id);
  assert.equal(a.type, 'function');
  assert.equal(a.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(a.function.arguments), { location: 'Paris', days: 3 });
  assert.deepEqual(JSON.parse(b.function.arguments), { location: 'Tōkyō' });

  const stream = await client.chat.completions.create({ ...body, stream: true }, opts);
  const calls = [];
  let content = '';
  let finish;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    content += ch.delta.content ?? '';
    for (const tc of ch.delta.tool_calls ?? []) calls[tc.index] = tc;
    finish = ch.finish_reason ?? finish;
  }
  assert.equal(content, 'Let me check.');
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(
    calls.map((t) => JSON.parse(t.function.arguments)),
    [{ location: 'Paris', days: 3 }, { location: 'Tōkyō' }],
  );

  // The answer goes back in as history (assistant tool_calls + tool results).
  const next = await client.chat.completions.create(
    {
      model: MODEL,
      tools: [WEATHER_TOOL_OPENAI],
      messages: [
        ...body.messages,
        c.message,
        { role: 'tool', tool_call_id: a.id, content: '{"temp": 21}' },
        { role: 'tool', tool_call_id: b.id, content: '{"temp": 25}' },
      ],
      max_tokens: 50,
    },
    { headers: forceHeader('Paris 21, Tokyo 25.') },
  );
  assert.equal(next.choices[0].message.content, 'Paris 21, Tokyo 25.');
  assert.equal(next.choices[0].finish_reason, 'stop');
});

test('a malformed tool block is returned as content, never half a call', async () => {
  const bad = '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="location">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>';
  const r = await client.chat.completions.create(
    { model: MODEL, messages: user('q'), tools: [WEATHER_TOOL_OPENAI], max_tokens: 200 },
    { headers: forceHeader(bad) },
  );
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.choices[0].message.content.includes('get_weather'));
});

test('thinking mode: reasoning_content and content split at </think>', async () => {
  const forced = 'Let me think about it.</think>The answer is 4.';
  for (const extra of [{ chat_template_kwargs: { thinking: true } }, { reasoning_effort: 'high' }]) {
    const r = await client.chat.completions.create(
      { model: MODEL, messages: user('2+2?'), max_tokens: 100, ...extra },
      { headers: forceHeader(forced) },
    );
    assert.equal(r.choices[0].message.reasoning_content, 'Let me think about it.');
    assert.equal(r.choices[0].message.content, 'The answer is 4.');
    const s = await client.chat.completions.create(
      { model: MODEL, messages: user('2+2?'), max_tokens: 100, stream: true, ...extra },
      { headers: forceHeader(forced) },
    );
    let reasoning = '';
    let content = '';
    for await (const c of s) {
      reasoning += c.choices[0]?.delta?.reasoning_content ?? '';
      content += c.choices[0]?.delta?.content ?? '';
    }
    assert.equal(reasoning, 'Let me think about it.');
    assert.equal(content, 'The answer is 4.');
  }
  // The prompt differs: thinking mode ends with <think>, chat mode with </think>.
  const chat = await post(server, '/tokenize', { messages: user('2+2?'), return_token_strs: true });
  const think = await post(server, '/tokenize', { messages: user('2+2?'), reasoning_effort: 'max', return_token_strs: true });
  assert.equal(chat.body.token_strs.at(-1), '</think>');
  assert.equal(think.body.token_strs.at(-1), '<think>');
  assert.ok(think.body.count > chat.body.count + 10); // the "max" effort text
});

test('legacy completions: string and token prompts, stream, echo, logprobs', async () => {
  const r = await freeClient.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: 2 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(r.choices[0].logprobs.tokens.length, 6);
  assert.equal(r.choices[0].logprobs.tokens.join(''), r.choices[0].text);
  assert.equal(Object.keys(r.choices[0].logprobs.top_logprobs[0]).length <= 2, true);
  const ids = (await post(free, '/tokenize', { prompt: 'Once upon a time' })).body.tokens;
  const byIds = await freeClient.completions.create({ model: MODEL, prompt: ids, max_tokens: 6, temperature: 0, ignore_eos: true });
  assert.equal(byIds.choices[0].text, r.choices[0].text);
  const s = await freeClient.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true, stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
  const echo = await freeClient.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true, echo: true });
  assert.equal(echo.choices[0].text, 'Once upon a time' + r.choices[0].text);
  const d = await post(free, '/detokenize', { tokens: ids });
  assert.equal(d.body.prompt, 'Once upon a time');
});
