// The transport's limits and HTTP correctness, spoken in raw HTTP: every limit answers at once
// (413 / 431 / 408) in its API's error shape and closes, before the body and before the API
// key; a request's key is refused before its body is sent; ambiguous framing (two different
// Content-Length values, Content-Length with Transfer-Encoding) is a 400; gzip/deflate bodies
// are inflated under the body cap (a gzip bomb is cut off); pipelined requests are answered in
// order; 100-continue; the key from a file and from the environment.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import zlib from 'node:zlib';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { startServer, MODEL } from './_server.mjs';
import { connect, rawRequest, sleepMs } from './_http_raw.mjs';

const MAX_BODY = 1 << 20;
let server;
before(async () => {
  server = await startServer([
    '--max-header-bytes', '8192', '--max-headers', '32', '--max-body-bytes', String(MAX_BODY),
    '--header-timeout', '1', '--body-timeout', '1', '--api-key', 'sekret', '--max-seqs', '2',
  ]);
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
});

const KEY = 'Authorization: Bearer sekret\r\n';
const chatBody = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, temperature: 0 });
const post = (p, body, extra = '') =>
  `POST ${p} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

function assertOpenAi(r, status, re) {
  assert.ok(r, 'no response');
  assert.equal(r.status, status, r.text);
  assert.deepEqual(Object.keys(r.json.error), ['message', 'type', 'param', 'code']);
  assert.match(r.json.error.message, re);
}
function assertAnthropic(r, status, re) {
  assert.ok(r, 'no response');
  assert.equal(r.status, status, r.text);
  assert.equal(r.json.type, 'error');
  assert.match(r.json.error.message, re);
}

test('431: a header over --max-header-bytes or with more than --max-headers fields, in each API shape, before the key', async () => {
  const big = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(20000)}\r\n\r\n`;
  let { response, closed, ms } = await rawRequest(server.port, big);
  assertOpenAi(response, 431, /larger than 8192 bytes/);
  assert.ok(closed && ms < 1000);
  // A header that never ends is cut at the limit too (the server does not wait for the rest).
  const c = await connect(server.port);
  await c.write(`POST /v1/messages HTTP/1.1\r\nX-Pad: ${'b'.repeat(9000)}`);
  const [r] = await c.waitResponses(1, 2000);
  assertAnthropic(r, 431, /larger than 8192 bytes/);
  await c.closed;
  const many = 'GET /v1/models HTTP/1.1\r\n' + Array.from({ length: 40 }, (_, i) => `X-H${i}: v\r\n`).join('') + '\r\n';
  ({ response } = await rawRequest(server.port, many));
  assertOpenAi(response, 431, /more than 32 header fields/);
});

test('413: Content-Length over the cap is refused before the body is sent; chunked bodies are cut while read', async () => {
  const c = await connect(server.port);
  await c.write(`POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: ${MAX_BODY + 1}\r\n\r\n`);
  const [r] = await c.waitResponses(1, 2000);
  assertAnthropic(r, 413, /larger than 1048576 bytes/);
  await c.closed;
  // Chunked: the server answers once the sum passes the cap, while the client is still sending.
  const d = await connect(server.port);
  await d.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Transfer-Encoding: chunked\r\n\r\n`);
  const piece = 'x'.repeat(65536);
  let sent = 0;
  while (!d.responses().length && !d.isClosed() && sent < 8 * MAX_BODY) {
    await d.write(`${piece.length.toString(16)}\r\n${piece}\r\n`).catch(() => {});
    sent += piece.length;
    await sleepMs(1);
  }
  const [cr] = await d.waitResponses(1, 2000);
  assertOpenAi(cr, 413, /larger than 1048576 bytes/);
  assert.ok(sent <= MAX_BODY + 4 * piece.length, `sent ${sent} bytes before the 413`);
  d.destroy();
});

test('gzip and deflate bodies are inflated; a gzip bomb is cut at the cap', async () => {
  for (const [coding, z] of [['gzip', zlib.gzipSync], ['deflate', zlib.deflateSync], ['deflate', zlib.deflateRawSync]]) {
    const body = z(Buffer.from(chatBody));
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Content-Type: application/json\r\nContent-Encoding: ${coding}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
    const { response } = await rawRequest(server.port, Buffer.concat([Buffer.from(head), body]));
    assert.equal(response.status, 200, `${coding}: ${response.text}`);
    assert.equal(response.json.usage.completion_tokens, 3);
  }
  // 200 MB of spaces inside a JSON string, compressed to ~200 KB.
  const bomb = zlib.gzipSync(Buffer.alloc(200 << 20, 0x20), { level: 9 });
  assert.ok(bomb.length < 300000);
  const t0 = process.cpuUsage();
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Content-Encoding: gzip\r\nContent-Length: ${bomb.length}\r\n\r\n`;
  const { response, ms } = await rawRequest(server.port, Buffer.concat([Buffer.from(head), bomb]));
  assertOpenAi(response, 413, /inflates to more than 1048576 bytes/);
  assert.ok(ms < 1000, `${ms} ms`);
  void t0;
  const rss = Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8'))[1]) * 1024;
  assert.ok(rss < 400 << 20, `server RSS ${rss} after the bomb`);
  // Unknown codings are a 415; a truncated gzip body a 400.
  let r = await rawRequest(server.port, post('/v1/chat/completions', chatBody, `${KEY}Content-Encoding: br\r\n`));
  assertOpenAi(r.response, 415, /'br' is not supported/);
  const cut = zlib.gzipSync(Buffer.from(chatBody)).subarray(0, 20);
  r = await rawRequest(server.port, Buffer.concat([Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\n${KEY}Content-Encoding: gzip\r\nContent-Length: ${cut.length}\r\n\r\n`), cut]));
  assertOpenAi(r.response, 400, /truncated/);
});

test('408: a header or a body that does not arrive within its deadline', async () => {
  const c = await connect(server.port);
  const t0 = Date.now();
  await c.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
  const [r] = await c.waitResponses(1, 4000);
  assertOpenAi(r, 408, /header did not arrive within 1 s/);
  assert.ok(Date.now() - t0 >= 900 && Date.now() - t0 < 3000, `${Date.now() - t0} ms`);
  await c.closed;
  const d = await connect(server.port);
  await d.write(`POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sekret\r\nContent-Length: 100\r\n\r\n{"model":`);
  const [b] = await d.waitResponses(1, 4000);
  assertAnthropic(b, 408, /body did not arrive within 1 s/);
  await d.closed;
  // An idle connection that never sends a byte is not answered, just kept (until --idle-timeout).
  const e = await connect(server.port);
  await sleepMs(1500);
  assert.equal(e.isClosed(), false);
  e.destroy();
});

test('the API key is checked before the body: a 401 arrives while the body is still unsent', async () => {
  for (const [p, check] of [['/v1/chat/completions', assertOpenAi], ['/v1/messages', assertAnthropic]]) {
    for (const key of ['', 'x-api-key: wrong\r\n']) {
      const c = await connect(server.port);
      await c.write(`POST ${p} HTTP/1.1\r\nHost: x\r\n${key}Content-Length: 1000000\r\n\r\n`);
      const [r] = await c.waitResponses(1, 2000);
      check(r, 401, key ? /invalid API key/ : /missing API key/);
      assert.equal(r.headers['connection'], 'close');
      await c.closed;
    }
  }
  // With the key the same header waits for the body (and, with Expect, is told to send it).
  const c = await connect(server.port);
  await c.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Expect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: ${chatBody.length}\r\n\r\n`);
  const [cont] = await c.waitResponses(1, 2000);
  assert.equal(cont.status, 100);
  await c.write(chatBody);
  const rs = await c.waitResponses(2, 5000);
  assert.equal(rs[1].status, 200, rs[1]?.text);
  c.destroy();
});

test('framing: conflicting Content-Length and Content-Length with Transfer-Encoding are 400; repeated equal ones pass', async () => {
  const cases = [
    [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!`, 400, /Content-Length/],
    [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Content-Length: 5, 6\r\n\r\nhello!`, 400, /Content-Length/],
    [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n`, 400, /Transfer-Encoding/],
    [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n`, 400, /Content-Length/],
    [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Transfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello`, 400, /Transfer-Encoding/],
    [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`, 501, /only chunked/],
    ['GARBAGE\r\n\r\n', 400, /malformed HTTP request/],
  ];
  for (const [bytes, status, re] of cases) {
    const { response, closed } = await rawRequest(server.port, bytes);
    assertOpenAi(response, status, re);
    assert.ok(closed, 'the connection is closed after a framing error');
  }
  const same = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Content-Type: application/json\r\nContent-Length: ${chatBody.length}\r\nContent-Length: ${chatBody.length}\r\nConnection: close\r\n\r\n${chatBody}`;
  assert.equal((await rawRequest(server.port, same)).response.status, 200);
  // Chunked request bodies are read.
  const half = Math.floor(chatBody.length / 2);
  const chunked = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${KEY}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n` +
    `${half.toString(16)}\r\n${chatBody.slice(0, half)}\r\n${(chatBody.length - half).toString(16)}\r\n${chatBody.slice(half)}\r\n0\r\n\r\n`;
  assert.equal((await rawRequest(server.port, chunked)).response.status, 200);
});

test('pipelining: requests sent together are all answered, in order', async () => {
  const c = await connect(server.port);
  const tok = (s) => JSON.stringify({ prompt: s });
  const bytes =
    'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' +
    post('/tokenize', tok('one two'), KEY) +
    post('/v1/chat/completions', chatBody, KEY) +
    'GET /v1/models HTTP/1.1\r\nHost: x\r\n' + KEY + '\r\n' +
    post('/tokenize', tok('three'), KEY);
  await c.write(bytes);
  const rs = await c.waitResponses(5, 10000);
  assert.equal(rs.length, 5);
  assert.deepEqual(rs.map((r) => r.status), [200, 200, 200, 200, 200]);
  assert.equal(rs[0].json.status, 'ok');
  assert.ok(Array.isArray(rs[1].json.tokens));
  assert.equal(rs[2].json.object, 'chat.completion');
  assert.equal(rs[3].json.object, 'list');
  assert.ok(rs[4].json.tokens.length < rs[1].json.tokens.length + 5);
  assert.notDeepEqual(rs[4].json.tokens, rs[1].json.tokens);
  assert.equal(c.isClosed(), false);  // keep-alive
  c.destroy();
});

test('--api-key-file and HYPERSTREAM_API_KEY: the key kept out of the command line', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hs-key-'));
  try {
    const file = path.join(dir, 'key');
    fs.writeFileSync(file, 'from-file\n');
    const a = await startServer(['--api-key-file', file]);
    const b = await startServer([], { env: { HYPERSTREAM_API_KEY: 'from-env' } });
    try {
      for (const [s, key] of [[a, 'from-file'], [b, 'from-env']]) {
        const ok = await fetch(`${s.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
        assert.equal(ok.status, 200);
        const bad = await fetch(`${s.url}/v1/models`, { headers: { authorization: 'Bearer other' } });
        assert.equal(bad.status, 401);
        assert.ok(!fs.readFileSync(`/proc/${s.proc.pid}/cmdline`, 'utf8').includes(key));
      }
    } finally {
      await a.stop();
      await b.stop();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
