// `serve` over a pipeline of processes (--rank/--world/--coordinator; docs/multi-gpu.md) on CPU
// ranks (TCP between them; the GPU form is NCCL and needs two GPUs): rank 0 runs HTTP, the
// scheduler and sampling, rank 1 the last layers. 16 concurrent greedy requests over the three
// APIs answer byte for byte what one process answers; a rank killed mid-stream ends the stream
// with the API's error event, answers a non-stream request with a 503 in its API's shape, and
// the others exit within 2 s (also when the server is idle); ranks started with different pools
// are refused at start-up.
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

import { CLI, startServer, post, parseSse, runCli } from './_server.mjs';

let dir;
let model;
before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'hs-pipeline-'));
  model = path.join(dir, 'tiny.gguf');
  const r = await runCli(['synth', '--preset', 'tiny', '--quant', 'q8', model]);
  assert.equal(r.code, 0, r.stderr);
});
after(() => rmSync(dir, { recursive: true, force: true }));
// Whatever a failed test left running goes (else the runner would wait for it).
const running = [];
afterEach(() => {
  for (const p of running.splice(0)) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

async function freePort() {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address();
  srv.close();
  return port;
}

// A serve process that is not waited on for readiness (ranks > 0 have no HTTP).
function spawnServe(args) {
  const proc = spawn(CLI, ['serve', ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, HS_LOG: 'error' } });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  running.push(proc);
  const exited = once(proc, 'exit').then(([code, signal]) => ({ code, signal, at: Date.now() }));
  return { proc, stderr: () => stderr, exited };
}

const common = ['--device', 'cpu'];
const ranked = ['--dist-timeout', '60'];
const seqs = (n) => ['--max-seqs', String(n)];

async function startPipeline(extra1 = []) {
  const coord = `127.0.0.1:${await freePort()}`;
  const rank1 = spawnServe([model, '--rank', '1', '--world', '2', '--coordinator', coord, '--threads', '1', ...common, ...ranked, ...seqs(16), ...extra1]);
  const rank0 = await startServer([model, '--rank', '0', '--world', '2', '--coordinator', coord, ...common, ...ranked, ...seqs(16)]);
  running.push(rank0.proc);
  return { rank0, rank1 };
}

// 16 requests over the three APIs, greedy, of different prompts and lengths.
const requests = Array.from({ length: 16 }, (_, i) => {
  const max_tokens = 6 + ((i * 7) % 29);
  const content = `request ${i}: ${'tell me about the sea '.repeat(1 + (i % 4))}`;
  if (i % 3 === 0)
    return ['/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content }], max_tokens, temperature: 0, ignore_eos: true }];
  if (i % 3 === 1) return ['/v1/completions', { model: 'm', prompt: content, max_tokens, temperature: 0, ignore_eos: true }];
  return ['/v1/messages', { model: 'm', messages: [{ role: 'user', content }], max_tokens, temperature: 0, ignore_eos: true }];
});

function answer(path_, body) {
  if (path_ === '/v1/chat/completions') return [body.choices[0].message.content, body.choices[0].finish_reason, body.usage.completion_tokens];
  if (path_ === '/v1/completions') return [body.choices[0].text, body.choices[0].finish_reason, body.usage.completion_tokens];
  return [body.content.map((c) => c.text ?? '').join(''), body.stop_reason, body.usage.output_tokens];
}

async function answersOf(server) {
  const rs = await Promise.all(requests.map(([p, b]) => post(server, p, b, { 'anthropic-version': '2023-06-01' })));
  return rs.map((r, i) => {
    assert.equal(r.status, 200, r.text);
    return answer(requests[i][0], r.body);
  });
}

// Rank 0 leaves with status 1 (its pipeline went down) within 2 s of `killed`.
async function assertRank0Stops(rank0, killed) {
  const [code] = await rank0.exited;
  const secs = (Date.now() - killed) / 1000;
  assert.equal(code, 1, rank0.stderr());
  assert.ok(secs < 2, `rank 0 took ${secs} s to exit`);
  assert.match(rank0.stderr(), /stopped: the pipeline of processes went down/);
}

test('16 concurrent greedy requests over 2 ranks answer what one process answers, byte for byte', async () => {
  const one = await startServer([model, ...common, ...seqs(16), '--prefix-cache', 'off']);
  running.push(one.proc);
  const want = await answersOf(one);
  assert.equal((await one.stop()).code, 0);

  const { rank0, rank1 } = await startPipeline();
  assert.match(rank0.stderr(), /rank 0 of 2: layers \[0, 3\) here/);
  assert.match(rank0.stderr(), /prefix cache off \(it does not span the ranks of a pipeline\)/);
  const got = await answersOf(rank0);
  assert.deepEqual(got, want);
  assert.ok(want.every(([text, , n]) => text.length > 0 && n >= 6));
  // A clean stop: rank 0 says shutdown, rank 1 exits 0.
  assert.equal((await rank0.stop()).code, 0);
  const r1 = await rank1.exited;
  assert.equal(r1.code, 0, rank1.stderr());
  assert.match(rank1.stderr(), /rank 1: shut down by rank 0/);
});

test('rank 1 killed mid-stream: 503s in each API\'s shape, rank 0 exits within 2 s', async () => {
  const { rank0, rank1 } = await startPipeline();
  const long = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 900, temperature: 0, ignore_eos: true };
  const stream = await fetch(`${rank0.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...long, stream: true }),
  });
  assert.equal(stream.status, 200);
  const reader = stream.body.getReader();
  let text = new TextDecoder().decode((await reader.read()).value);  // tokens are flowing
  const anth = post(rank0, '/v1/messages', long, { 'anthropic-version': '2023-06-01' });
  const chat = post(rank0, '/v1/chat/completions', long);
  await new Promise((r) => setTimeout(r, 50));
  rank1.proc.kill('SIGKILL');
  const killed = Date.now();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  const events = parseSse(text);
  assert.equal(events.at(-1).data, '[DONE]');
  const err = events.at(-2).data;
  assert.equal(err.error.type, 'service_unavailable_error', text.slice(-600));
  assert.match(err.error.message, /pipeline of processes is down: rank 1 .* closed its connection/);
  const a = await anth;
  assert.equal(a.status, 503, a.text);
  assert.deepEqual(Object.keys(a.body), ['type', 'error']);
  assert.equal(a.body.error.type, 'overloaded_error');
  const c = await chat;
  assert.equal(c.status, 503, c.text);
  assert.equal(c.body.error.type, 'service_unavailable_error');
  await assertRank0Stops(rank0, killed);
});

test('rank 1 killed while the server is idle: rank 0 exits within 2 s', async () => {
  const { rank0, rank1 } = await startPipeline();
  const ok = await post(rank0, '/v1/completions', { model: 'm', prompt: 'hi', max_tokens: 4, temperature: 0 });
  assert.equal(ok.status, 200, ok.text);
  rank1.proc.kill('SIGKILL');
  const killed = Date.now();
  await assertRank0Stops(rank0, killed);
});

test('rank 0 killed: rank 1 exits non-zero within 2 s', async () => {
  const { rank0, rank1 } = await startPipeline();
  const long = { model: 'm', prompt: 'hi', max_tokens: 900, temperature: 0, ignore_eos: true, stream: true };
  const stream = await fetch(`${rank0.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(long),
  });
  await stream.body.getReader().read();
  rank0.proc.kill('SIGKILL');
  const killed = Date.now();
  const r1 = await rank1.exited;
  const secs = (r1.at - killed) / 1000;
  assert.equal(r1.code, 1, rank1.stderr());
  assert.ok(secs < 2, `rank 1 took ${secs} s to exit`);
  assert.match(rank1.stderr(), /rank 0/);
});

test('ranks with different state pools are refused at start-up, naming both', async () => {
  const coord = `127.0.0.1:${await freePort()}`;
  const rank1 = spawnServe([model, '--rank', '1', '--world', '2', '--coordinator', coord, ...common, ...ranked, ...seqs(4)]);
  const rank0 = spawnServe([model, '--rank', '0', '--world', '2', '--coordinator', coord, '--port', '0', ...common, ...ranked, ...seqs(16)]);
  const [r0, r1] = await Promise.all([rank0.exited, rank1.exited]);
  assert.equal(r0.code, 1, rank0.stderr());
  assert.notEqual(r1.code, 0, rank1.stderr());
  assert.match(rank0.stderr(), /rank 1 \(cpu on .*\) has a state pool of 4 slots \(--max-seqs\).*rank 0 has 16 slots/);
});

test('the options a pipeline cannot honour are refused', async () => {
  for (const [args, re] of [
    [['--prefix-cache', 'on'], /the prefix cache does not span the ranks/],
    [['--draft', 'mtp'], /speculative decoding does not run on a pipeline of processes/],
  ]) {
    const r = await runCli(['serve', model, '--rank', '0', '--world', '2', '--coordinator', '127.0.0.1:1', '--device', 'cpu', '--port', '0', ...args]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, re);
  }
  const r = await runCli(['serve', '--rank', '1', '--world', '2', '--coordinator', '127.0.0.1:1', '--device', 'cpu']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /needs a MODEL file/);
});
