// Slow, idle and bursting clients cannot starve the others: with 500 idle connections and 100
// that trickle a header byte at a time, /health and a chat request answer within a second;
// the listen backlog is at least 1,024 (--listen-backlog); a burst of 512 connections opened
// at once is served in full; 64 streams open at once are not capped by a thread count.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import net from 'node:net';

import { startServer, post, metric, until, MODEL } from './_server.mjs';
import { connect, sleepMs } from './_http_raw.mjs';

let server;
before(async () => {
  // Deadlines far beyond the test: the slow clients must be outlasted by design, not cut off.
  server = await startServer(['--max-seqs', '4', '--header-timeout', '60', '--http-threads', '2']);
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
});

function openSocket(port) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port, host: '127.0.0.1' }, () => resolve(s));
    s.once('error', reject);
  });
}

test('listen backlog: at least 1,024 (the default), as --listen-backlog sets it', async () => {
  const backlogOf = (port) => {
    const out = execFileSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' });
    return Number(out.trim().split(/\s+/)[2]);  // Send-Q of a listening socket: its backlog
  };
  const somaxconn = Number(execFileSync('cat', ['/proc/sys/net/core/somaxconn'], { encoding: 'utf8' }));
  assert.equal(backlogOf(server.port), Math.min(4096, somaxconn));
  if (somaxconn >= 1024) assert.ok(backlogOf(server.port) >= 1024);
  const s = await startServer(['--listen-backlog', '1500']);
  try {
    assert.equal(backlogOf(s.port), Math.min(1500, somaxconn));
  } finally {
    await s.stop();
  }
});

test('500 idle and 100 slow-trickle connections: /health and a chat request answer within 1 s', async () => {
  const idle = [];
  for (let i = 0; i < 500; ++i) idle.push(await openSocket(server.port));
  const slow = [];
  for (let i = 0; i < 100; ++i) slow.push(await openSocket(server.port));
  const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'z'.repeat(200);
  let stop = false;
  const trickle = (async () => {
    for (let i = 0; !stop && i < head.length; ++i) {
      for (const s of slow) s.write(head[i]);
      await sleepMs(100);
    }
  })();
  await sleepMs(500);
  assert.ok((await metric(server, 'hyperstream_http_connections_open')) >= 600);
  const worst = [0, 0];
  for (let round = 0; round < 3; ++round) {
    let t0 = Date.now();
    const h = await fetch(`${server.url}/health`);
    assert.equal(h.status, 200);
    const healthMs = Date.now() - t0;
    t0 = Date.now();
    const r = await post(server, '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, temperature: 0 });
    const chatMs = Date.now() - t0;
    assert.equal(r.status, 200, r.text);
    assert.ok(healthMs < 1000 && chatMs < 1000, `/health ${healthMs} ms, chat ${chatMs} ms`);
    worst[0] = Math.max(worst[0], healthMs);
    worst[1] = Math.max(worst[1], chatMs);
    await sleepMs(200);
  }
  console.log(`[load] 500 idle + 100 trickling: slowest /health ${worst[0]} ms, slowest chat ${worst[1]} ms`);
  stop = true;
  await trickle;
  for (const s of [...idle, ...slow]) s.destroy();
  await until(async () => (await metric(server, 'hyperstream_http_connections_open')) <= 2, 5000, 'the connections to close');
});

test('a burst of 512 connections opened at once is served in full', async () => {
  const results = await Promise.all(
    Array.from({ length: 512 }, async () => {
      const c = await connect(server.port);
      await c.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      const [r] = await c.waitResponses(1, 15000);
      c.destroy();
      return r ? r.status : c.error()?.code ?? 'none';
    }),
  );
  const bad = results.filter((s) => s !== 200);
  assert.equal(bad.length, 0, `not served: ${JSON.stringify(bad.slice(0, 10))}`);
});

test('64 streams open at once with 2 handler threads: every one runs to its end', async () => {
  const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'go' }], max_tokens: 6, ignore_eos: true, stream: true });
  const texts = await Promise.all(
    Array.from({ length: 64 }, async () => {
      const r = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      assert.equal(r.status, 200);
      return r.text();
    }),
  );
  for (const t of texts) assert.ok(t.trimEnd().endsWith('data: [DONE]'), t.slice(-200));
  assert.equal(await metric(server, 'hyperstream_http_streams_open'), 0);
});
