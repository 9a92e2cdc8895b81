// Operations of `hyperstream serve`: /health, /metrics, API keys, CORS, the access log, a client
// disconnect freeing its slot, graceful shutdown on SIGTERM/SIGINT with streams open, and
// `--synthetic` (a preset model instead of the built-in one).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

import { startServer, post, metric, until, parseSse, MODEL } from './_server.mjs';

const chat = (extra = {}) => ({ messages: [{ role: 'user', content: 'Go on forever' }], temperature: 0, ...extra });

// Opens a stream and resolves once its first bytes arrived: {reader, text(): rest, abort()}.
async function openStream(server, path, body) {
  const ctl = new AbortController();
  const r = await fetch(server.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
    signal: ctl.signal,
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let text = '';
  while (!text.includes('\n\n')) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
  }
  return {
    abort: () => ctl.abort(),
    async rest() {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return text;
        text += dec.decode(value, { stream: true });
      }
    },
  };
}

test('health, metrics and the access log', async () => {
  const s = await startServer();
  try {
    const h = await fetch(`${s.url}/health`);
    assert.equal(h.status, 200);
    assert.deepEqual(await h.json(), { status: 'ok', model: MODEL });
    const before = await metric(s, 'hyperstream_generation_tokens_total');
    const r = await post(s, '/v1/chat/completions', chat({ max_tokens: 5, ignore_eos: true }));
    assert.equal(r.status, 200);
    const text = await (await fetch(`${s.url}/metrics`)).text();
    for (const name of [
      'hyperstream_requests_running', 'hyperstream_requests_waiting', 'hyperstream_max_sequences',
      'hyperstream_state_memory_bytes', 'hyperstream_prompt_tokens_total', 'hyperstream_generation_tokens_total',
      'hyperstream_device_sampled_tokens_total', 'hyperstream_decode_graph_replays_total',
      'hyperstream_decode_graph_captures_total', 'hyperstream_decode_graph_capture_failures_total',
      'hyperstream_prefill_throughput_tokens_per_second', 'hyperstream_decode_throughput_tokens_per_second',
      'hyperstream_request_prefill_tokens_per_second_bucket', 'hyperstream_request_decode_tokens_per_second_bucket',
      'hyperstream_time_to_first_token_seconds_count', 'hyperstream_http_requests_total',
    ])
      assert.ok(text.includes(`\n${name}`), `metric ${name}`);
    assert.equal(await metric(s, 'hyperstream_generation_tokens_total'), before + 5);
    assert.equal(await metric(s, 'hyperstream_device_sampled_tokens_total'), 0);  // the CPU samples on the host
    assert.equal(await metric(s, 'hyperstream_decode_graph_replays_total'), 0);  // and has no CUDA graphs
    assert.equal(await metric(s, 'hyperstream_http_requests_total{route="/v1/chat/completions",status="200"}'), 1);
    assert.equal(await metric(s, 'hyperstream_requests_finished_total{api="chat",finish_reason="length"}'), 1);
    assert.ok((await metric(s, 'hyperstream_prompt_tokens_total')) >= r.body.usage.prompt_tokens);
    const log = s.accessLog().find((l) => l.path === '/v1/chat/completions');
    assert.equal(log.status, 200);
    assert.equal(log.completion_tokens, 5);
    assert.equal(log.finish, 'length');
    assert.equal(log.id, r.body.id);
    assert.equal(typeof log.ms, 'number');
  } finally {
    await s.stop();
  }
});

test('API key: Bearer or x-api-key; 401 in each API shape; CORS preflight', async () => {
  const s = await startServer(['--api-key', 'sekret', '--cors']);
  try {
    const noKey = await post(s, '/v1/chat/completions', chat({ max_tokens: 2 }));
    assert.equal(noKey.status, 401);
    assert.equal(noKey.body.error.type, 'authentication_error');
    assert.ok('param' in noKey.body.error && 'code' in noKey.body.error);
    const wrong = await post(s, '/v1/messages', { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }, { 'x-api-key': 'nope' });
    assert.equal(wrong.status, 401);
    assert.deepEqual(Object.keys(wrong.body), ['type', 'error']);
    assert.equal(wrong.body.error.type, 'authentication_error');
    assert.equal((await post(s, '/v1/chat/completions', chat({ max_tokens: 2 }), { authorization: 'Bearer sekret' })).status, 200);
    assert.equal((await post(s, '/v1/chat/completions', chat({ max_tokens: 2 }), { 'x-api-key': 'sekret' })).status, 200);
    assert.equal((await fetch(`${s.url}/health`)).status, 200); // no key needed
    // The SDKs send their key the way the server expects.
    const oa = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'sekret', maxRetries: 0 });
    assert.equal((await oa.chat.completions.create({ model: MODEL, ...chat({ max_tokens: 2 }) })).object, 'chat.completion');
    const an = new Anthropic({ baseURL: s.url, apiKey: 'sekret', maxRetries: 0 });
    assert.equal((await an.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] })).type, 'message');
    await assert.rejects(new Anthropic({ baseURL: s.url, apiKey: 'bad', maxRetries: 0 }).messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }), (e) => e.status === 401);
    // CORS.
    const pre = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'OPTIONS',
      headers: { origin: 'http://example.com', 'access-control-request-method': 'POST' },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), '*');
    assert.match(pre.headers.get('access-control-allow-headers'), /Authorization/);
    const got = await fetch(`${s.url}/v1/models`, { headers: { authorization: 'Bearer sekret' } });
    assert.equal(got.headers.get('access-control-allow-origin'), '*');
  } finally {
    await s.stop();
  }
});

test('a client disconnect cancels its sequence and frees the slot', async () => {
  // One slot: a leaked slot would block every later request.
  const s = await startServer(['--max-seqs', '1', '--ctx-size', '2048']);
  try {
    for (const path of ['/v1/chat/completions', '/v1/messages']) {
      const body = path === '/v1/messages'
        ? { model: MODEL, max_tokens: 1900, ignore_eos: true, messages: [{ role: 'user', content: 'Go on forever' }] }
        : chat({ max_tokens: 1900, ignore_eos: true });
      const st = await openStream(s, path, body);
      await until(async () => (await metric(s, 'hyperstream_requests_running')) === 1, 3000, 'the request to run');
      st.abort();
      await until(async () => (await metric(s, 'hyperstream_requests_running')) === 0, 3000, 'the slot to free');
      const log = await until(() => s.accessLog().find((l) => l.path === path && l.disconnected), 3000, 'access log');
      assert.equal(log.stream, true);
      // The slot is usable at once.
      const r = await post(s, '/v1/chat/completions', chat({ max_tokens: 3 }));
      assert.equal(r.status, 200);
    }
    // A non-streaming request whose client gives up is cancelled too.
    const ctl = new AbortController();
    const p = fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat({ max_tokens: 1900, ignore_eos: true })),
      signal: ctl.signal,
    }).catch(() => null);
    await until(async () => (await metric(s, 'hyperstream_requests_running')) === 1, 3000, 'the request to start');
    ctl.abort();
    await p;
    await until(async () => (await metric(s, 'hyperstream_requests_running')) === 0, 3000, 'the slot to free');
    const cancelled = await metric(s, 'hyperstream_requests_finished_total{api="chat",finish_reason="cancelled"}');
    assert.equal(cancelled, 2);
    assert.ok((await metric(s, 'hyperstream_generation_tokens_total')) < 1900 * 2);
    assert.equal(await metric(s, 'hyperstream_http_streams_open'), 0);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});

test('SIGTERM with streams open: they finish, the process exits 0', async () => {
  const s = await startServer(['--max-seqs', '4']);
  const streams = await Promise.all([
    openStream(s, '/v1/chat/completions', chat({ max_tokens: 300, ignore_eos: true })),
    openStream(s, '/v1/chat/completions', chat({ max_tokens: 200, ignore_eos: true })),
    openStream(s, '/v1/messages', { model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'x' }] }),
  ]);
  const exit = s.stop('SIGTERM');
  const [a, b, c] = await Promise.all(streams.map((st) => st.rest()));
  for (const t of [a, b]) {
    const ev = parseSse(t);
    assert.equal(ev.at(-1).data, '[DONE]');
    assert.equal(ev.at(-2).data.choices[0].finish_reason, 'length');
  }
  assert.equal(parseSse(c).at(-1).event, 'message_stop');
  assert.deepEqual(await exit, { code: 0, signal: null });
  await assert.rejects(fetch(`${s.url}/health`)); // no longer listening
});

test('SIGINT with --shutdown-timeout 0: open streams are cancelled, end cleanly, exit 0', async () => {
  const s = await startServer(['--max-seqs', '4', '--ctx-size', '2048', '--shutdown-timeout', '0']);
  const streams = await Promise.all([
    openStream(s, '/v1/chat/completions', chat({ max_tokens: 1900, ignore_eos: true })),
    openStream(s, '/v1/messages', { model: MODEL, max_tokens: 1900, ignore_eos: true, messages: [{ role: 'user', content: 'x' }] }),
  ]);
  const exit = s.stop('SIGINT');
  const [oa, an] = await Promise.all(streams.map((st) => st.rest()));
  const oev = parseSse(oa);
  assert.equal(oev.at(-1).data, '[DONE]');
  assert.equal(oev.at(-2).data.error.code, 'cancelled');
  const aev = parseSse(an);
  assert.equal(aev.at(-1).event, 'error');
  assert.equal(aev.at(-1).data.error.type, 'overloaded_error');
  assert.deepEqual(await exit, { code: 0, signal: null });
});

test('--synthetic tiny: a preset served under its synthetic name answers a chat request', async () => {
  const s = await startServer(['--synthetic', 'tiny', '--layers', '2', '--quant', 'q8']);
  try {
    const name = 'synthetic-tiny-2L-q8';
    assert.deepEqual(await (await fetch(`${s.url}/health`)).json(), { status: 'ok', model: name });
    const r = await post(s, '/v1/chat/completions', chat({ model: name, max_tokens: 4, ignore_eos: true }));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.model, name);
    assert.equal(r.body.usage.completion_tokens, 4);
    assert.match(s.stderr(), /ready: model synthetic-tiny-2L-q8/);
  } finally {
    assert.equal((await s.stop()).code, 0);
  }
});
