// Failures after admission: a generation whose engine fails (forced with the test-only header
// X-HS-Test-Engine-Fail-After of `serve --test-hooks`) answers a non-stream request with a 500 in
// its API's error shape, and ends a stream with the API's error event; a non-stream request cut
// off by the shutdown gets a 503. No slot leaks: a one-slot server keeps answering.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

import { startServer, post, metric, until, parseSse, sleep, MODEL } from './_server.mjs';

let server;
before(async () => {
  server = await startServer(['--max-seqs', '1', '--test-hooks']);
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
});

const failAfter = (n) => ({ 'X-HS-Test-Engine-Fail-After': String(n) });
const msgs = [{ role: 'user', content: 'hi' }];
const chat = (extra) => ({ model: MODEL, messages: msgs, max_tokens: 8, ignore_eos: true, temperature: 0, ...extra });
const anth = (extra) => ({ model: MODEL, messages: msgs, max_tokens: 8, ignore_eos: true, temperature: 0, ...extra });

function assertOpenAiError(body, type) {
  assert.deepEqual(Object.keys(body), ['error']);
  assert.deepEqual(Object.keys(body.error), ['message', 'type', 'param', 'code']);
  assert.equal(body.error.type, type);
}
function assertAnthropicError(body, type) {
  assert.deepEqual(Object.keys(body), ['type', 'error']);
  assert.equal(body.type, 'error');
  assert.deepEqual(Object.keys(body.error), ['type', 'message']);
  assert.equal(body.error.type, type);
}

async function assertFree(s) {
  await until(async () => (await metric(s, 'hyperstream_requests_running')) === 0, 3000, 'the slot to free');
  assert.equal(await metric(s, 'hyperstream_requests_waiting'), 0);
  const ok = await post(s, '/v1/chat/completions', chat({ max_tokens: 2 }));
  assert.equal(ok.status, 200, ok.text);
}

test('non-stream: an engine failure is a 500 in each API\'s error shape (before and after the first token)', async () => {
  for (const n of [0, 3]) {
    const oa = await post(server, '/v1/chat/completions', chat(), failAfter(n));
    assert.equal(oa.status, 500, oa.text);
    assertOpenAiError(oa.body, 'server_error');
    assert.match(oa.body.error.message, /generation failed: .*test hook/);
    assert.match(oa.headers.get('content-type'), /application\/json/);
    const cmpl = await post(server, '/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 8, ignore_eos: true }, failAfter(n));
    assert.equal(cmpl.status, 500, cmpl.text);
    assertOpenAiError(cmpl.body, 'server_error');
    const an = await post(server, '/v1/messages', anth(), failAfter(n));
    assert.equal(an.status, 500, an.text);
    assertAnthropicError(an.body, 'api_error');
    assert.match(an.body.error.message, /test hook/);
  }
  // The SDKs see a server error, not a malformed success.
  const oc = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0, defaultHeaders: failAfter(1) });
  await assert.rejects(oc.chat.completions.create(chat()), (e) => e.status === 500 && e.error?.type === 'server_error');
  const ac = new Anthropic({ baseURL: server.url, apiKey: 'x', maxRetries: 0, defaultHeaders: failAfter(1) });
  await assert.rejects(ac.messages.create(anth()), (e) => e.status === 500 && e.error?.error?.type === 'api_error');
  // The failures are counted and logged as errors; nothing leaked.
  assert.ok((await metric(server, 'hyperstream_requests_finished_total{api="chat",finish_reason="error"}')) >= 3);
  const log = server.accessLog().filter((l) => l.status === 500);
  assert.ok(log.length >= 6);
  assert.ok(log.every((l) => l.finish === 'error' && /test hook/.test(l.error)));
  await assertFree(server);
});

test('stream: an engine failure ends the stream with the API\'s error event', async () => {
  for (const n of [0, 3]) {
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...failAfter(n) },
      body: JSON.stringify(chat({ stream: true, stream_options: { include_usage: true } })),
    });
    assert.equal(r.status, 200);
    const ev = parseSse(await r.text());
    assert.equal(ev.at(-1).data, '[DONE]');
    assertOpenAiError(ev.at(-2).data, 'server_error');
    assert.match(ev.at(-2).data.error.message, /test hook/);
    assert.ok(ev.slice(0, -2).every((e) => e.data.object === 'chat.completion.chunk' && e.data.choices[0].finish_reason === null));

    const a = await fetch(`${server.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...failAfter(n) },
      body: JSON.stringify(anth({ stream: true })),
    });
    assert.equal(a.status, 200);
    const aev = parseSse(await a.text());
    assert.equal(aev[0].event, 'message_start');
    assert.equal(aev.at(-1).event, 'error');
    assertAnthropicError(aev.at(-1).data, 'api_error');
    assert.ok(!aev.some((e) => e.event === 'message_stop' || e.event === 'message_delta'));
  }
  await assertFree(server);
});

test('test hook header: malformed is a 400; without --test-hooks it is ignored', async () => {
  const r = await post(server, '/v1/chat/completions', chat(), { 'X-HS-Test-Engine-Fail-After': 'soon' });
  assert.equal(r.status, 400);
  assertOpenAiError(r.body, 'invalid_request_error');
  const plain = await startServer(['--max-seqs', '1']);
  try {
    const ok = await post(plain, '/v1/chat/completions', chat(), failAfter(0));
    assert.equal(ok.status, 200, ok.text);
  } finally {
    await plain.stop();
  }
});

test('non-stream requests cut off by the shutdown get a 503 in each API\'s shape', async () => {
  const s = await startServer(['--max-seqs', '2', '--ctx-size', '2048', '--shutdown-timeout', '0']);
  const long = { max_tokens: 1900, ignore_eos: true };
  const oa = post(s, '/v1/chat/completions', chat(long));
  const an = post(s, '/v1/messages', anth(long));
  await until(async () => (await metric(s, 'hyperstream_requests_running')) === 2, 5000, 'both requests to run');
  await sleep(50);
  const exit = s.stop('SIGINT');
  const [o, a] = await Promise.all([oa, an]);
  assert.equal(o.status, 503, o.text);
  assertOpenAiError(o.body, 'service_unavailable_error');
  assert.equal(o.body.error.code, 'cancelled');
  assert.equal(a.status, 503, a.text);
  assertAnthropicError(a.body, 'overloaded_error');
  assert.deepEqual(await exit, { code: 0, signal: null });
});
