// Malformed requests: every one gets a 4xx with a JSON body in its API's own error shape, the
// server never crashes, and no slot leaks (a one-slot server still answers afterwards).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, post, metric, MODEL } from './_server.mjs';

let server;
before(async () => {
  server = await startServer(['--max-seqs', '1', '--strict-model-name']);
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
});

const msgs = [{ role: 'user', content: 'hi' }];
const chat = (extra) => ({ messages: msgs, max_tokens: 4, ...extra });
const anth = (extra) => ({ model: MODEL, max_tokens: 4, messages: msgs, ...extra });
const tool = (fn) => ({ type: 'function', function: fn });
const longText = 'lorem ipsum dolor sit amet '.repeat(400);

// [name, path, body (object or raw string), status, param (OpenAI) or null, message regexp]
const OPENAI = '/v1/chat/completions';
const CASES = [
  ['invalid JSON', OPENAI, '{"messages": [', 400, null, /not valid JSON/],
  ['body is an array', OPENAI, '[]', 400, null, /JSON object/],
  ['messages missing', OPENAI, { max_tokens: 4 }, 400, 'messages', /required/],
  ['messages empty', OPENAI, chat({ messages: [] }), 400, 'messages', /empty/],
  ['messages a string', OPENAI, chat({ messages: 'hi' }), 400, 'messages', /array/],
  ['message not an object', OPENAI, chat({ messages: [1] }), 400, 'messages', /messages\[0\]/],
  ['unknown role', OPENAI, chat({ messages: [{ role: 'wizard', content: 'x' }] }), 400, 'messages', /role/],
  ['content a number', OPENAI, chat({ messages: [{ role: 'user', content: 5 }] }), 400, 'messages', /content/],
  ['message name a number', OPENAI, chat({ messages: [{ role: 'user', content: 'x', name: 5 }] }), 400, 'messages', /name/],
  ['unknown model', OPENAI, chat({ model: 'gpt-9' }), 404, 'model', /gpt-9/],
  ['model not a string', OPENAI, chat({ model: 5 }), 400, 'model', /string/],
  ['max_tokens 0', OPENAI, chat({ max_tokens: 0 }), 400, 'max_tokens', /at least 1/],
  ['max_tokens negative', OPENAI, chat({ max_tokens: -5 }), 400, 'max_tokens', /at least 1/],
  ['max_tokens a string', OPENAI, chat({ max_tokens: '10' }), 400, 'max_tokens', /integer/],
  ['max_tokens fractional', OPENAI, chat({ max_tokens: 1.5 }), 400, 'max_tokens', /integer/],
  ['max_completion_tokens 0', OPENAI, chat({ max_completion_tokens: 0 }), 400, 'max_completion_tokens', /at least 1/],
  ['max_tokens beyond the context', OPENAI, chat({ max_tokens: 100000 }), 400, 'messages', /^This model's maximum context length is 1024 tokens\. However, you requested \d+ tokens \(\d+ in the messages, 100000 in the completion\)/],
  ['prompt beyond the context', OPENAI, chat({ messages: [{ role: 'user', content: longText }], max_tokens: null }), 400, 'messages', /maximum context length is 1024 tokens\. However, your messages resulted in \d+ tokens/],
  ['temperature a string', OPENAI, chat({ temperature: 'hot' }), 400, 'temperature', /number/],
  ['temperature too high', OPENAI, chat({ temperature: 5 }), 400, 'temperature', /between 0 and 2/],
  ['top_p zero', OPENAI, chat({ top_p: 0 }), 400, 'top_p', /greater than 0/],
  ['top_k a string', OPENAI, chat({ top_k: 'x' }), 400, 'top_k', /integer/],
  ['min_p above 1', OPENAI, chat({ min_p: 2 }), 400, 'min_p', /between/],
  ['presence_penalty out of range', OPENAI, chat({ presence_penalty: 3 }), 400, 'presence_penalty', /between -2 and 2/],
  ['seed a string', OPENAI, chat({ seed: 'abc' }), 400, 'seed', /integer/],
  ['n = 2', OPENAI, chat({ n: 2 }), 400, 'n', /n = 1/],
  ['stop a number', OPENAI, chat({ stop: 5 }), 400, 'stop', /string/],
  ['stop with an empty string', OPENAI, chat({ stop: [''] }), 400, 'stop', /empty/],
  ['stop too many', OPENAI, chat({ stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }), 400, 'stop', /at most 16/],
  ['tools not an array', OPENAI, chat({ tools: {} }), 400, 'tools', /array/],
  ['tool without function', OPENAI, chat({ tools: [{ type: 'function' }] }), 400, 'tools', /function/],
  ['tool of another type', OPENAI, chat({ tools: [{ type: 'retrieval', function: { name: 'f' } }] }), 400, 'tools', /"function"/],
  ['tool without a name', OPENAI, chat({ tools: [tool({ parameters: {} })] }), 400, 'tools', /name/],
  ['tool name with spaces', OPENAI, chat({ tools: [tool({ name: 'get weather' })] }), 400, 'tools', /letters/],
  ['tool parameters not an object', OPENAI, chat({ tools: [tool({ name: 'f', parameters: 'x' })] }), 400, 'tools', /JSON Schema/],
  ['duplicate tool names', OPENAI, chat({ tools: [tool({ name: 'f' }), tool({ name: 'f' })] }), 400, 'tools', /twice/],
  ['tool_choice unknown function', OPENAI, chat({ tools: [tool({ name: 'f' })], tool_choice: { type: 'function', function: { name: 'g' } } }), 400, 'tool_choice', /'g'/],
  ['tool_choice unknown string', OPENAI, chat({ tool_choice: 'sometimes' }), 400, 'tool_choice', /sometimes/],
  ['tool_choice required without tools', OPENAI, chat({ tool_choice: 'required' }), 400, 'tool_choice', /needs tools/],
  ['logprobs a string', OPENAI, chat({ logprobs: 'yes' }), 400, 'logprobs', /boolean/],
  ['top_logprobs too many', OPENAI, chat({ logprobs: true, top_logprobs: 50 }), 400, 'top_logprobs', /at most 20/],
  ['top_logprobs without logprobs', OPENAI, chat({ top_logprobs: 2 }), 400, 'top_logprobs', /logprobs/],
  ['stream a string', OPENAI, chat({ stream: 'yes' }), 400, 'stream', /boolean/],
  ['stream_options without stream', OPENAI, chat({ stream_options: { include_usage: true } }), 400, 'stream_options', /stream/],
  ['user a number', OPENAI, chat({ user: 5 }), 400, 'user', /string/],
  ['metadata a string', OPENAI, chat({ metadata: 'x' }), 400, 'metadata', /object/],
  ['response_format of an unknown type', OPENAI, chat({ response_format: { type: 'xml' } }), 400, 'response_format', /json_schema/],
  ['chat_template_kwargs a string', OPENAI, chat({ chat_template_kwargs: 'x' }), 400, 'chat_template_kwargs', /object/],
  ['thinking flag not a boolean', OPENAI, chat({ chat_template_kwargs: { thinking: 'on' } }), 400, 'thinking', /boolean/],
  ['reasoning_effort a number', OPENAI, chat({ reasoning_effort: 3 }), 400, 'reasoning_effort', /string/],
  ['completions: prompt missing', '/v1/completions', { max_tokens: 3 }, 400, 'prompt', /required/],
  ['completions: empty prompt', '/v1/completions', { prompt: '' }, 400, 'prompt', /empty/],
  ['completions: token id out of range', '/v1/completions', { prompt: [999999] }, 400, 'prompt', /vocabulary/],
  ['completions: two prompts', '/v1/completions', { prompt: ['a', 'b'] }, 400, 'prompt', /one prompt/],
  ['completions: logprobs above 5', '/v1/completions', { prompt: 'a', logprobs: 10 }, 400, 'logprobs', /at most 5/],
  ['completions: suffix', '/v1/completions', { prompt: 'a', suffix: 'b' }, 400, 'suffix', /not supported/],
  ['detokenize: not ids', '/detokenize', { tokens: ['a'] }, 400, 'tokens', /integers/],
  ['tokenize: nothing to tokenize', '/tokenize', {}, 400, 'prompt', /required/],
];

const ANTHROPIC_CASES = [
  ['max_tokens missing', '/v1/messages', { model: MODEL, messages: msgs }, 400, /max_tokens/],
  ['max_tokens 0', '/v1/messages', anth({ max_tokens: 0 }), 400, /at least 1/],
  ['messages missing', '/v1/messages', { model: MODEL, max_tokens: 4 }, 400, /messages/],
  ['messages empty', '/v1/messages', anth({ messages: [] }), 400, /empty/],
  ['invalid JSON', '/v1/messages', '{', 400, /not valid JSON/],
  ['role tool in messages', '/v1/messages', anth({ messages: [{ role: 'tool', content: 'x' }] }), 400, /role/],
  ['content a number', '/v1/messages', anth({ messages: [{ role: 'user', content: 7 }] }), 400, /content/],
  ['unknown block type', '/v1/messages', anth({ messages: [{ role: 'user', content: [{ type: 'container_upload', file_id: 'f' }] }] }), 400, /container_upload/],
  ['tool_result without tool_use_id', '/v1/messages', anth({ messages: [{ role: 'user', content: [{ type: 'tool_result', content: 'x' }] }] }), 400, /tool_use_id/],
  ['tool_use without input', '/v1/messages', anth({ messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f' }] }] }), 400, /input/],
  ['tool without input_schema', '/v1/messages', anth({ tools: [{ name: 'f' }] }), 400, /input_schema/],
  ['tool name with markup', '/v1/messages', anth({ tools: [{ name: 'f"><｜User｜>', input_schema: { type: 'object' } }] }), 400, /letters/],
  ['duplicate tool names', '/v1/messages', anth({ tools: [{ name: 'f', input_schema: { type: 'object' } }, { name: 'f', input_schema: { type: 'object' } }] }), 400, /twice/],
  ['server tool', '/v1/messages', anth({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }), 400, /not supported/],
  ['tool_choice tool without name', '/v1/messages', anth({ tools: [{ name: 'f', input_schema: { type: 'object' } }], tool_choice: { type: 'tool' } }), 400, /name/],
  ['tool_choice names an unknown tool', '/v1/messages', anth({ tools: [{ name: 'f', input_schema: { type: 'object' } }], tool_choice: { type: 'tool', name: 'g' } }), 400, /'g'/],
  ['thinking budget zero', '/v1/messages', anth({ thinking: { type: 'enabled', budget_tokens: 0 } }), 400, /budget_tokens/],
  ['thinking display unknown', '/v1/messages', anth({ thinking: { type: 'adaptive', display: 'full' } }), 400, /display/],
  ['output_config.effort unknown', '/v1/messages', anth({ output_config: { effort: 'extreme' } }), 400, /effort/],
  ['output_format not json_schema', '/v1/messages', anth({ output_format: { type: 'xml' } }), 400, /json_schema/],
  ['thinking of an unknown type', '/v1/messages', anth({ thinking: { type: 'maybe' } }), 400, /thinking/],
  ['temperature above 1', '/v1/messages', anth({ temperature: 1.5 }), 400, /between 0 and 1/],
  ['stop_sequences a string', '/v1/messages', anth({ stop_sequences: 'STOP' }), 400, /array/],
  ['system a number', '/v1/messages', anth({ system: 5 }), 400, /system/],
  ['metadata a string', '/v1/messages', anth({ metadata: 'x' }), 400, /object/],
  ['unknown model', '/v1/messages', anth({ model: 'claude-9' }), 404, /claude-9/],
  ['beyond the context', '/v1/messages', anth({ max_tokens: 5000 }), 400, /^input length and `max_tokens` exceed context limit: \d+ \+ 5000 > 1024, decrease input length or `max_tokens` and try again$/],
  ['count_tokens: messages missing', '/v1/messages/count_tokens', { model: MODEL }, 400, /messages/],
];

test(`OpenAI-shaped errors (${CASES.length} malformed requests)`, async () => {
  for (const [name, path, body, status, param, re] of CASES) {
    const r = await post(server, path, body);
    assert.equal(r.status, status, `${name}: status (${r.text})`);
    assert.ok(r.body && typeof r.body.error === 'object', `${name}: body ${r.text}`);
    assert.deepEqual(Object.keys(r.body.error), ['message', 'type', 'param', 'code'], name);
    assert.equal(r.body.error.type, 'invalid_request_error', name);
    assert.equal(r.body.error.param, param, `${name}: param`);
    assert.match(r.body.error.message, re, name);
    assert.match(r.headers.get('content-type'), /application\/json/);
  }
});

test(`Anthropic-shaped errors (${ANTHROPIC_CASES.length} malformed requests)`, async () => {
  for (const [name, path, body, status, re] of ANTHROPIC_CASES) {
    const r = await post(server, path, body);
    assert.equal(r.status, status, `${name}: status (${r.text})`);
    assert.ok(r.body, `${name}: body ${r.text}`);
    assert.equal(r.body.type, 'error', name);
    assert.deepEqual(Object.keys(r.body.error), ['type', 'message'], name);
    assert.equal(r.body.error.type, status === 404 ? 'not_found_error' : 'invalid_request_error', name);
    assert.match(r.body.error.message, re, name);
  }
});

test('routes and methods: 404 / 405 in each shape; deep JSON refused; the server still serves', async () => {
  let r = await fetch(`${server.url}/v1/nothing`);
  assert.equal(r.status, 404);
  assert.equal((await r.json()).error.type, 'invalid_request_error');
  r = await fetch(`${server.url}/v1/messages`);
  assert.equal(r.status, 405);
  assert.equal((await r.json()).type, 'error');
  r = await fetch(`${server.url}/v1/chat/completions`);
  assert.equal(r.status, 405);
  // Deeply nested JSON is refused, not recursed into.
  const deep = '{"messages": ' + '['.repeat(100000) + ']'.repeat(100000) + '}';
  const d = await post(server, OPENAI, deep);
  assert.equal(d.status, 400);
  // Nothing leaked: the single slot is free and answers.
  assert.equal(await metric(server, 'hyperstream_requests_running'), 0);
  assert.equal(await metric(server, 'hyperstream_requests_waiting'), 0);
  const ok = await post(server, OPENAI, chat({}));
  assert.equal(ok.status, 200);
  assert.equal(server.proc.exitCode, null);
});
