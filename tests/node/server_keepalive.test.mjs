// Keep-alives while a prompt is prefilled: a test hook holds each request back (as a long
// prefill would), and every stream must keep sending its API's own keep-alive event (Anthropic
// `event: ping`, an empty chat delta, a Responses `keepalive` event: SSE comments would not
// reach the SDKs' idle timers) until the first token. The SDK clients, given an idle watchdog
// like Claude Code's and Codex's, survive it; without keep-alives the same watchdog fires.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Agent, Runner, OpenAIProvider, setTracingDisabled } from '@openai/agents';

import { startServer, forceHeader, parseSse, MODEL } from './_server.mjs';

const HOLD_MS = 2000; // the held-back "prefill"
const KEEPALIVE_S = 0.25;
const IDLE_MS = 800; // the clients' watchdog

let server, quiet;
before(async () => {
  [server, quiet] = await Promise.all([
    startServer(['--test-hooks', '--keepalive', String(KEEPALIVE_S)]),
    startServer(['--test-hooks', '--keepalive', '0']),
  ]);
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
  assert.equal((await quiet.stop()).code, 0);
});

const hooks = (text) => ({ ...forceHeader(text), 'X-HS-Test-Hold-Prefill-Ms': String(HOLD_MS) });
const REQUESTS = {
  chat: ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true }],
  messages: ['/v1/messages', { model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'hi' }], stream: true }],
  responses: ['/v1/responses', { model: MODEL, input: 'hi', stream: true }],
};

// A fetch that aborts a response whose body is silent for `idleMs`, and notes each gap.
function watchdogFetch(idleMs, gaps) {
  return async (url, init) => {
    const ctrl = new AbortController();
    const res = await fetch(url, { ...init, signal: ctrl.signal });
    let timer;
    let last = Date.now();
    const arm = () => {
      clearTimeout(timer);
      gaps.push(Date.now() - last);
      last = Date.now();
      timer = setTimeout(() => ctrl.abort(new Error(`no bytes for ${idleMs} ms`)), idleMs);
    };
    arm();
    const body = res.body.pipeThrough(
      new TransformStream({
        transform(chunk, c) {
          arm();
          c.enqueue(chunk);
        },
        flush() {
          clearTimeout(timer);
        },
      }),
    );
    return new Response(body, { status: res.status, headers: res.headers });
  };
}

test('each stream sends its keep-alive event through a held-back prefill, then the answer', async () => {
  const results = await Promise.all(
    Object.entries(REQUESTS).map(async ([api, [path, body]]) => {
      const t0 = Date.now();
      const r = await fetch(server.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...hooks('Hello!') }, body: JSON.stringify(body) });
      const text = await r.text();
      return [api, parseSse(text), Date.now() - t0];
    }),
  );
  const minPings = Math.floor(HOLD_MS / (KEEPALIVE_S * 1000)) - 3;
  for (const [api, events, ms] of results) {
    assert.ok(ms >= HOLD_MS, `${api}: took ${ms} ms`);
    let pings = 0, answer = '';
    for (const { event, data } of events) {
      if (api === 'chat' && data !== '[DONE]') {
        const delta = data.choices[0]?.delta;
        if (delta && Object.keys(delta).length === 0 && data.choices[0].finish_reason === null && !answer) ++pings;
        answer += delta?.content ?? '';
      } else if (api === 'messages') {
        if (event === 'ping') ++pings;
        if (data.type === 'content_block_delta') answer += data.delta.text;
      } else if (api === 'responses') {
        if (event === 'keepalive') {
          assert.deepEqual(Object.keys(data).sort(), ['sequence_number', 'type']);
          ++pings;
        }
        if (data.type === 'response.output_text.delta') answer += data.delta;
      }
    }
    assert.ok(pings >= minPings, `${api}: ${pings} keep-alives in ${HOLD_MS} ms`);
    assert.equal(answer, 'Hello!', api);
  }
  // Without keep-alives the streams are silent for the whole hold.
  const [path, body] = REQUESTS.messages;
  const r = await fetch(quiet.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...hooks('Hello!') }, body: JSON.stringify(body) });
  assert.equal(parseSse(await r.text()).filter((e) => e.event === 'ping').length, 1); // the one after message_start
});

test('the SDK clients with an idle watchdog survive a long prefill, and would not without keep-alives', async () => {
  const clients = (url, gaps) => ({
    openai: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0, fetch: watchdogFetch(IDLE_MS, gaps) }),
    anthropic: new Anthropic({ baseURL: url, apiKey: 'x', maxRetries: 0, fetch: watchdogFetch(IDLE_MS, gaps) }),
    agents: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0, fetch: watchdogFetch(IDLE_MS, gaps), defaultHeaders: hooks('Hello!') }),
  });
  const runAll = (c) => {
    const headers = hooks('Hello!');
    setTracingDisabled(true);
    return [
      (async () => {
        let text = '';
        for await (const chunk of await c.openai.chat.completions.create({ ...REQUESTS.chat[1] }, { headers })) text += chunk.choices[0]?.delta?.content ?? '';
        return text;
      })(),
      c.anthropic.messages.stream({ ...REQUESTS.messages[1] }, { headers }).finalMessage().then((m) => m.content[0].text),
      c.openai.responses.stream({ model: MODEL, input: 'hi' }, { headers }).finalResponse().then((r) => r.output_text),
      (async () => {  // the Agents SDK, streaming (its default Responses API)
        const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: c.agents }) });
        const s = await runner.run(new Agent({ name: 'A', instructions: 'Greet.', model: MODEL }), 'hi', { stream: true });
        for await (const _ of s) {
          // drain
        }
        await s.completed;
        return s.finalOutput;
      })(),
    ];
  };
  const gaps = [];
  assert.deepEqual(await Promise.all(runAll(clients(server.url, gaps))), ['Hello!', 'Hello!', 'Hello!', 'Hello!']);
  assert.ok(Math.max(...gaps) < IDLE_MS, `largest gap ${Math.max(...gaps)} ms`);
  const quietGaps = [];
  const settled = await Promise.allSettled(runAll(clients(quiet.url, quietGaps)));
  assert.deepEqual(settled.map((s) => s.status), ['rejected', 'rejected', 'rejected', 'rejected']);
  for (const s of settled) assert.match(String(s.reason?.cause?.message ?? s.reason?.message ?? s.reason), new RegExp(`no bytes for ${IDLE_MS} ms`));
});
