// Soak, bounded: 520 mixed requests at 32 at a time — OpenAI and Anthropic, streamed and
// whole, greedy answers compared with their solo runs, clients that leave mid-stream, bad
// requests (malformed JSON, oversized headers, conflicting Content-Length, unknown routes)
// interleaved, clients that trickle their request, pipelined pairs, /health and /metrics.
// Then: no crash and no 5xx, every greedy answer equal to its solo run, the in-flight gauges
// back to zero, the resident memory at idle within 10 % of where it started, and a clean exit
// on SIGTERM. (Resident memory after a warm-up of 260 requests: the allocator's arenas of every
// thread have grown by then.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { execFileSync } from 'node:child_process';

import { startServer, post, metric, until, parseSse, MODEL } from './_server.mjs';
import { connect, rawRequest, sleepMs } from './_http_raw.mjs';

// HS_SOAK_N: a longer run by hand (e.g. 20000); CI runs the default.
const N = Number(process.env.HS_SOAK_N ?? 520);
const CONCURRENCY = 32;
const PROMPTS = Array.from({ length: 8 }, (_, i) => `Question ${i}: tell me about number ${i * 7 + 3}.`);
const chat = (p, extra = {}) => ({ model: MODEL, messages: [{ role: 'user', content: p }], max_tokens: 10, temperature: 0, ...extra });
const anth = (p) => ({ model: MODEL, max_tokens: 10, temperature: 0, messages: [{ role: 'user', content: p }] });

const rss = (pid) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;

async function streamText(server, body, abortAfterFirst = false) {
  const ctl = new AbortController();
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }), signal: ctl.signal,
  });
  if (abortAfterFirst) {
    const reader = r.body.getReader();
    await reader.read();
    ctl.abort();
    return { status: r.status, text: null };
  }
  const events = parseSse(await r.text());
  const text = events.filter((e) => e.data !== '[DONE]').map((e) => e.data.choices[0]?.delta?.content ?? '').join('');
  return { status: r.status, text };
}

test(`soak: ${N} mixed requests, ${CONCURRENCY} at a time`, async () => {
  const server = await startServer(['--max-seqs', '8', '--max-header-bytes', '16384', '--prefix-cache', 'off']);
  try {
    // The solo answers (one request at a time).
    const solo = [], soloAnth = [];
    for (const p of PROMPTS) {
      const r = await post(server, '/v1/chat/completions', chat(p));
      assert.equal(r.status, 200, r.text);
      solo.push(r.body.choices[0].message.content);
      const a = await post(server, '/v1/messages', anth(p));
      soloAnth.push(a.body.content.map((b) => b.text ?? '').join(''));
    }
    const statuses = new Map();
    const mismatches = [];
    const note = (kind, status) => {
      const k = `${kind} ${status}`;
      statuses.set(k, (statuses.get(k) ?? 0) + 1);
    };
    const one = async (i) => {
      const p = i % PROMPTS.length;
      switch (i % 13) {
        case 0: case 1: case 2: case 3: {
          const r = await post(server, '/v1/chat/completions', chat(PROMPTS[p]));
          note('chat', r.status);
          if (r.status === 200 && r.body.choices[0].message.content !== solo[p]) mismatches.push(['chat', p]);
          return;
        }
        case 4: case 5: {
          const r = await streamText(server, chat(PROMPTS[p]));
          note('stream', r.status);
          if (r.text !== solo[p]) mismatches.push(['stream', p, r.text, solo[p]]);
          return;
        }
        case 6: {
          const r = await post(server, '/v1/messages', anth(PROMPTS[p]));
          note('messages', r.status);
          if (r.status === 200 && r.body.content.map((b) => b.text ?? '').join('') !== soloAnth[p]) mismatches.push(['messages', p]);
          return;
        }
        case 7: {  // leaves after the first chunk of a long stream
          const r = await streamText(server, chat(PROMPTS[p], { max_tokens: 200, ignore_eos: true }), true);
          note('abandoned', r.status);
          return;
        }
        case 8: {
          const r = await post(server, i % 2 ? '/v1/chat/completions' : '/v1/messages', '{"messages": [');
          note('bad-json', r.status);
          assert.equal(r.status, 400);
          return;
        }
        case 9: {
          const bytes = i % 2
            ? `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: ${'p'.repeat(20000)}\r\n\r\n`
            : 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd';
          const { response } = await rawRequest(server.port, bytes);
          note('raw-bad', response?.status);
          assert.equal(response?.status, i % 2 ? 431 : 400);
          return;
        }
        case 10: {  // a client that trickles its request
          const c = await connect(server.port);
          const body = JSON.stringify({ prompt: PROMPTS[p] });
          const req = `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
          for (let k = 0; k < req.length; k += Math.ceil(req.length / 5)) {
            await c.write(req.slice(k, k + Math.ceil(req.length / 5)));
            await sleepMs(40);
          }
          const [r] = await c.waitResponses(1, 10000);
          c.destroy();
          note('trickle', r?.status);
          return;
        }
        case 11: {
          const r = await fetch(`${server.url}${i % 2 ? '/health' : '/metrics'}`);
          await r.text();
          note('ops', r.status);
          if (i % 4 === 1) note('unknown-route', (await post(server, '/v1/nothing', {})).status);
          return;
        }
        case 12: {  // a pipelined pair
          const c = await connect(server.port);
          const body = JSON.stringify(chat(PROMPTS[p]));
          const one = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
          await c.write(one + 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
          const rs = await c.waitResponses(2, 20000);
          c.destroy();
          note('pipelined', rs.map((r) => r.status).join('+'));
          if (rs[0]?.json?.choices?.[0]?.message?.content !== solo[p]) mismatches.push(['pipelined', p]);
          return;
        }
      }
    };
    const runAll = async (count, offset) => {
      let next = 0;
      await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
        while (next < count) await one(offset + next++);
      }));
    };
    const idle = async () => {
      await until(async () => (await metric(server, 'hyperstream_requests_running')) === 0 &&
        (await metric(server, 'hyperstream_requests_waiting')) === 0 &&
        (await metric(server, 'hyperstream_http_streams_open')) === 0 &&
        (await metric(server, 'hyperstream_http_requests_in_flight')) === 0, 10000, 'the server to be idle');
      await sleepMs(300);
    };
    await runAll(260, 0);  // warm-up: every kind of request on every thread, the allocator's arenas grown
    await idle();
    const rss0 = rss(server.proc.pid);
    const t0 = Date.now();
    await runAll(N, 260);
    const ms = Date.now() - t0;
    await idle();
    const rss1 = rss(server.proc.pid);
    const summary = Object.fromEntries([...statuses].sort());
    console.log(`[soak] ${N} requests in ${ms} ms; statuses ${JSON.stringify(summary)}; RSS ${(rss0 / 1048576).toFixed(1)} -> ${(rss1 / 1048576).toFixed(1)} MiB`);
    const odd = server.accessLog().filter((l) => l.status === 408 || l.status >= 500);
    if (odd.length) console.log('[soak] odd answers:', JSON.stringify(odd.slice(0, 5)));
    console.log(`[soak] connections open at idle: ${await metric(server, 'hyperstream_http_connections_open')}`);
    assert.deepEqual(mismatches, []);
    for (const k of statuses.keys()) assert.ok(!/ 5\d\d/.test(k) && !/undefined/.test(k), `status ${k}`);
    assert.equal(server.proc.exitCode, null);
    assert.ok(rss1 <= rss0 * 1.1, `RSS at idle ${rss1} vs ${rss0} at the start`);
    // Connections left: only those fetch's keep-alive pool still holds open on its side (every
    // raw connection the test closed is gone on the server's too).
    const clientSide = () =>
      execFileSync('ss', ['-tnH', 'state', 'established', `dport = :${server.port}`], { encoding: 'utf8' }).split('\n').filter((l) => l.trim()).length;
    await until(async () => (await metric(server, 'hyperstream_http_connections_open')) === clientSide(), 5000,
      'the server\'s connections to be those its clients hold');
  } finally {
    assert.deepEqual(await server.stop(), { code: 0, signal: null });
  }
});
