// The Responses API of `hyperstream serve` through the official `openai` SDK (responses.create,
// .stream with its strict event accumulator, a tool round trip, text.format, the store) and
// the OpenAI Agents SDK in its default mode (which speaks the Responses API), on the built-in
// model with forced outputs; raw HTTP where the wire itself is checked.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Agent, run, tool, setDefaultOpenAIClient, setTracingDisabled } from '@openai/agents';
import { z } from 'zod';

import { startServer, post, forceHeader, dsmlCalls, parseSse, MODEL } from './_server.mjs';

let server;
let client;
const WEATHER = {
  type: 'function',
  name: 'get_weather',
  description: 'Weather of a city',
  parameters: { type: 'object', properties: { location: { type: 'string' } }, required: ['location'] },
};
const force = (text) => ({ headers: forceHeader(text) });

before(async () => {
  server = await startServer(['--ctx-size', '4096', '--test-hooks', '--response-store', '4'], { log: 'warn' });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
});

test('responses.create: reasoning and message items, usage with reasoning tokens, output_text', async () => {
  const r = await client.responses.create(
    { model: 'gpt-5-codex', input: 'Hello', reasoning: { effort: 'high' }, instructions: 'Be brief.' },
    force('Greet back.</think>Hi there!'),
  );
  assert.match(r.id, /^resp_[A-Za-z0-9]{24}$/);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.model, MODEL); // any model name is answered with the served one
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.deepEqual(r.output[0].content, [{ type: 'reasoning_text', text: 'Greet back.' }]);
  assert.equal(r.output[1].role, 'assistant');
  assert.equal(r.output_text, 'Hi there!');
  assert.equal(r.instructions, 'Be brief.');
  assert.deepEqual(r.reasoning, { effort: 'high', summary: null });
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  assert.ok(r.usage.output_tokens > r.usage.output_tokens_details.reasoning_tokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  // The same chat as the chat API renders it (instructions = a system message).
  const t = await post(server, '/tokenize', {
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }],
    reasoning_effort: 'high',
  });
  assert.equal(r.usage.input_tokens, t.body.count);
  // Without reasoning the default (chat mode) applies: everything is text.
  const plain = await client.responses.create({ model: MODEL, input: 'Hello' }, force('Greet back.</think>Hi there!'));
  assert.deepEqual(plain.output.map((o) => o.type), ['message']);
});

test('responses.stream: the SDK accumulates the stream; raw events are typed and numbered', async () => {
  const body = { model: MODEL, input: 'Hello', reasoning: { effort: 'high' } };
  const s = client.responses.stream(body, force('Greet back.</think>Hi there!'));
  const types = [];
  let text = '';
  s.on('event', (e) => types.push(e.type));
  s.on('response.output_text.delta', (e) => (text += e.delta));
  const final = await s.finalResponse();
  assert.equal(final.output_text, 'Hi there!');
  assert.equal(text, 'Hi there!');
  assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.equal(types.at(-1), 'response.completed');
  for (const kind of ['reasoning_text', 'output_text']) {
    assert.ok(types.includes(`response.${kind}.delta`), kind);
    assert.ok(types.includes(`response.${kind}.done`), kind);
  }
  assert.equal(types.filter((t) => t === 'response.output_item.added').length, 2);
  assert.equal(types.filter((t) => t === 'response.output_item.done').length, 2);

  const r = await fetch(`${server.url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...forceHeader('Greet back.</think>Hi there!') },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const events = parseSse(await r.text());
  events.forEach((e, i) => {
    assert.equal(e.event, e.data.type);
    assert.equal(e.data.sequence_number, i);
  });
  assert.equal(events[0].data.response.status, 'in_progress');
  assert.deepEqual(events[0].data.response.output, []);
  const done = events.at(-1).data.response;
  assert.equal(done.status, 'completed');
  assert.equal(done.output.length, 2);
  assert.ok(done.usage.input_tokens > 0);
});

test('tool round trip: function_call item, then function_call_output by previous_response_id and by full input', async () => {
  const forced = 'Checking.' + dsmlCalls([{ name: 'get_weather', args: { location: 'Oslo' } }]);
  const first = await client.responses.stream({ model: MODEL, input: 'Weather in Oslo?', tools: [WEATHER] }, force(forced)).finalResponse();
  assert.equal(first.status, 'completed');
  assert.deepEqual(first.output.map((o) => o.type), ['message', 'function_call']);
  const call = first.output[1];
  assert.match(call.call_id, /^call_[A-Za-z0-9]{24}$/);
  assert.match(call.id, /^fc_/);
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { location: 'Oslo' });
  const nonStream = await client.responses.create({ model: MODEL, input: 'Weather in Oslo?', tools: [WEATHER] }, force(forced));
  assert.deepEqual(JSON.parse(nonStream.output[1].arguments), { location: 'Oslo' });

  const output = { type: 'function_call_output', call_id: call.call_id, output: 'sunny, 12C' };
  const byId = await client.responses.create(
    { model: MODEL, previous_response_id: first.id, input: [output], tools: [WEATHER] },
    force('It is sunny.'),
  );
  assert.equal(byId.output_text, 'It is sunny.');
  assert.equal(byId.previous_response_id, first.id);
  // The same conversation sent whole (as Codex does with store: false) renders the same prompt.
  const whole = await client.responses.create(
    { model: MODEL, input: [{ role: 'user', content: 'Weather in Oslo?' }, ...first.output, output], tools: [WEATHER], store: false },
    force('It is sunny.'),
  );
  assert.equal(whole.usage.input_tokens, byId.usage.input_tokens);
  // ... and the chat API's equivalent too.
  const chat = await post(server, '/tokenize', {
    messages: [
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: 'Checking.', tool_calls: [{ id: call.call_id, type: 'function', function: { name: 'get_weather', arguments: call.arguments } }] },
      { role: 'tool', tool_call_id: call.call_id, content: 'sunny, 12C' },
    ],
    tools: [{ type: 'function', function: { name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.parameters } }],
  });
  assert.equal(whole.usage.input_tokens, chat.body.count);
  await assert.rejects(client.responses.retrieve(whole.id), (e) => e.status === 404); // store: false
});

test('text.format json_schema and json_object: accepted, echoed, and shown to the model', async () => {
  const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };
  const r = await client.responses.create(
    { model: MODEL, input: 'Capital of Norway?', text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } } },
    force('{"city": "Oslo"}'),
  );
  assert.deepEqual(JSON.parse(r.output_text), { city: 'Oslo' });
  assert.deepEqual(r.text.format, { type: 'json_schema', name: 'answer', schema, strict: true });
  const plain = await client.responses.create({ model: MODEL, input: 'Capital of Norway?' }, force('{"city": "Oslo"}'));
  assert.ok(r.usage.input_tokens > plain.usage.input_tokens + 10); // the schema is in the prompt
  const obj = await client.responses.create({ model: MODEL, input: 'x', text: { format: { type: 'json_object' } } }, force('{}'));
  assert.equal(obj.status, 'completed');
  const bad = await post(server, '/v1/responses', { model: MODEL, input: 'x', text: { format: { type: 'json_schema', schema: 5 } } });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.param, 'text.format');
});

test('tools the server cannot run are left out, not refused; tool_choice forcing one is a 400', async () => {
  const hosted = [{ type: 'web_search' }, { type: 'namespace', name: 'multi_agent_v1', tools: [WEATHER] }, { type: 'file_search', vector_store_ids: ['x'] }];
  const a = await client.responses.create({ model: MODEL, input: 'hi', tools: [WEATHER, ...hosted] }, force('ok'));
  const b = await client.responses.create({ model: MODEL, input: 'hi', tools: [WEATHER] }, force('ok'));
  assert.equal(a.usage.input_tokens, b.usage.input_tokens);
  assert.equal(a.tools.length, 4); // echoed as sent
  assert.match(server.stderr(), /the web_search tool is not one this server can run/);
  const r = await post(server, '/v1/responses', { model: MODEL, input: 'hi', tools: hosted, tool_choice: { type: 'web_search' } });
  assert.equal(r.status, 400);
  assert.match(r.body.error.message, /web_search/);
  // allowed_tools narrows the tools; "none" drops them.
  const none = await client.responses.create({ model: MODEL, input: 'hi', tools: [WEATHER], tool_choice: 'none' }, force('ok'));
  const bare = await client.responses.create({ model: MODEL, input: 'hi' }, force('ok'));
  assert.equal(none.usage.input_tokens, bare.usage.input_tokens);
  const allowed = await client.responses.create(
    { model: MODEL, input: 'hi', tools: [WEATHER], tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'other' }] } },
    force('ok'),
  );
  assert.equal(allowed.usage.input_tokens, bare.usage.input_tokens);
});

test('max_output_tokens: status incomplete (stream: response.incomplete)', async () => {
  const long = force('one two three four five six seven eight nine ten');
  const r = await client.responses.create({ model: MODEL, input: 'count', max_output_tokens: 3 }, long);
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.usage.output_tokens, 3);
  const raw = await fetch(`${server.url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...long.headers },
    body: JSON.stringify({ model: MODEL, input: 'count', max_output_tokens: 3, stream: true }),
  });
  const events = parseSse(await raw.text());
  assert.equal(events.at(-1).event, 'response.incomplete');
  assert.equal(events.at(-1).data.response.status, 'incomplete');
});

test('store: GET and DELETE /v1/responses/{id}, bounded (oldest out), unknown ids', async () => {
  const ids = [];
  for (let i = 0; i < 5; ++i) ids.push((await client.responses.create({ model: MODEL, input: `n${i}` }, force(`answer ${i}`))).id);
  const got = await client.responses.retrieve(ids[4]);
  assert.equal(got.output_text, 'answer 4');
  await assert.rejects(client.responses.retrieve(ids[0]), (e) => e.status === 404); // --response-store 4
  const del = await fetch(`${server.url}/v1/responses/${ids[4]}`, { method: 'DELETE' });
  assert.deepEqual(await del.json(), { id: ids[4], object: 'response', deleted: true });
  await assert.rejects(client.responses.retrieve(ids[4]), (e) => e.status === 404);
  const r = await post(server, '/v1/responses', { model: MODEL, input: 'x', previous_response_id: 'resp_nope' });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.param, 'previous_response_id');
  assert.match(r.body.error.message, /resp_nope/);
});

test('malformed requests get 400s in the OpenAI shape', async () => {
  const cases = [
    [{ model: MODEL }, 'input', /required/],
    [{ input: 5 }, 'input', /string or an array/],
    [{ input: [{ type: 'image_generation_call', id: 'x' }] }, 'input', /image_generation_call/],
    [{ input: [{ role: 'wizard', content: 'x' }] }, 'input', /role/],
    [{ input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }, 'input', /call_id/],
    [{ input: [{ role: 'user', content: [{ type: 'input_video' }] }] }, 'input', /input_video/],
    [{ input: 'x', tools: [{ type: 'function', name: 'bad name' }] }, 'tools', /letters/],
    [{ input: 'x', tools: [WEATHER], tool_choice: { type: 'function', name: 'nope' } }, 'tool_choice', /nope/],
    [{ input: 'x', background: true }, 'background', /background/],
    [{ input: 'x', include: ['message.output_text.logprobs'] }, 'include', /logprobs/],
    [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens', /at least 1/],
    [{ input: 'x', max_output_tokens: 100000 }, 'input', /^Your input exceeds the context window of this model/],
  ];
  for (const [body, param, re] of cases) {
    const r = await post(server, '/v1/responses', body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.body.error.param, param, JSON.stringify(body));
    assert.match(r.body.error.message, re, JSON.stringify(body));
  }
  const overflow = await post(server, '/v1/responses', { input: 'x', max_output_tokens: 100000 });
  assert.equal(overflow.body.error.code, 'context_length_exceeded');
});

test('a generation that fails: 500 in the OpenAI shape, or a response.failed event in a stream', async () => {
  const headers = { ...forceHeader('one two three four five'), 'X-HS-Test-Engine-Fail-After': '2' };
  const r = await post(server, '/v1/responses', { model: MODEL, input: 'x' }, headers);
  assert.equal(r.status, 500);
  assert.equal(r.body.error.type, 'server_error');
  const raw = await fetch(`${server.url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: MODEL, input: 'x', stream: true }),
  });
  const events = parseSse(await raw.text());
  const last = events.at(-1);
  assert.equal(last.event, 'response.failed');
  assert.equal(last.data.response.status, 'failed');
  assert.equal(last.data.response.error.code, 'server_error');
  assert.match(last.data.response.error.message, /test hook/);
  await assert.rejects(client.responses.retrieve(last.data.response.id), (e) => e.status === 404); // not stored
});

test('images in input become a placeholder (the model reads text)', async () => {
  const r = await client.responses.create(
    { model: MODEL, input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is this?' }, { type: 'input_image', image_url: 'data:image/png;base64,AAAA' }] }] },
    force('A picture.'),
  );
  assert.equal(r.output_text, 'A picture.');
  const t = await post(server, '/tokenize', { messages: [{ role: 'user', content: 'What is this?\n\n[Unsupported input_image]' }] });
  assert.equal(r.usage.input_tokens, t.body.count);
});

test('the Agents SDK in its default mode (Responses API) runs a tool loop, plain and streamed', async () => {
  setTracingDisabled(true); // nothing may leave the machine
  const requests = [];
  // Forces each model turn: the tool call first, the answer once the tool output is back.
  const agentsClient = new OpenAI({
    baseURL: `${server.url}/v1`,
    apiKey: 'unused',
    maxRetries: 0,
    fetch: async (url, init) => {
      const body = JSON.parse(init.body);
      requests.push(body);
      const last = body.input.at(-1);
      const out = last.type === 'function_call_output' ? `Forecast: ${last.output}` : 'Let me look.' + dsmlCalls([{ name: 'get_weather', args: { city: 'Oslo' } }]);
      return fetch(url, { ...init, headers: { ...Object.fromEntries(new Headers(init.headers)), ...forceHeader(out) } });
    },
  });
  setDefaultOpenAIClient(agentsClient);
  const calls = [];
  const getWeather = tool({
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      calls.push(city);
      return `sunny in ${city}`;
    },
  });
  const agent = new Agent({ name: 'Weather', instructions: 'Answer weather questions.', model: 'gpt-5.6-luna', tools: [getWeather] });
  const result = await run(agent, 'Weather in Oslo?');
  assert.equal(result.finalOutput, 'Forecast: sunny in Oslo');
  assert.deepEqual(calls, ['Oslo']);
  assert.equal(requests.length, 2);
  assert.deepEqual(requests[1].input.map((i) => i.type ?? 'message'), ['message', 'message', 'function_call', 'function_call_output']);
  const streamed = await run(agent, 'Weather in Oslo?', { stream: true });
  for await (const _ of streamed) {
    // drain the events
  }
  await streamed.completed;
  assert.equal(streamed.finalOutput, 'Forecast: sunny in Oslo');
  assert.deepEqual(calls, ['Oslo', 'Oslo']);
  assert.equal(requests.at(-1).stream, true);
});
