#!/usr/bin/env node
// The HTTP attacks of issue 18 against a running `hyperstream serve`, each with what the
// server spent on it (resident memory and CPU from /proc/PID) and how it answered:
//   node scripts/http_attacks.mjs URL PID [KEY]
// Run the server with `--api-key KEY` for the rows that check what happens before the 401.
// Node's standard library only.
import net from 'node:net';
import zlib from 'node:zlib';
import fs from 'node:fs';

const [url, pidArg, key] = process.argv.slice(2);
if (!url || !pidArg) {
  console.error('usage: http_attacks.mjs URL PID [KEY]');
  process.exit(2);
}
const { hostname, port } = new URL(url);
const pid = Number(pidArg);
const auth = key ? `Authorization: Bearer ${key}\r\n` : '';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssMiB = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
const cpuS = () => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;  // utime + stime, clock ticks of 10 ms
};

// Opens a connection; sends what `feed(write)` writes until a response starts or feed ends.
function attack(feed, ms = 60000) {
  return new Promise((resolve) => {
    const sock = net.connect({ host: hostname, port: Number(port) });
    let got = '', sent = 0, done = false;
    const t0 = Date.now();
    const finish = (why) => {
      if (done) return;
      done = true;
      sock.destroy();
      const m = /^HTTP\/1\.[01] (\d+)/.exec(got);
      resolve({ status: m ? Number(m[1]) : why, sentMiB: +(sent / 1048576).toFixed(2), ms: Date.now() - t0 });
    };
    sock.on('data', (d) => {
      got += d.toString('latin1');
      if (/\r\n\r\n/.test(got)) setTimeout(() => finish('no status'), 50);
    });
    sock.on('error', (e) => finish(e.code));
    sock.on('close', () => finish('closed'));
    setTimeout(() => finish('timeout'), ms);
    sock.on('connect', async () => {
      const write = (b) => new Promise((res) => {
        if (done) return res(false);
        sent += b.length;
        sock.write(b, () => res(!done));
      });
      await feed(write, () => done);
    });
  });
}

async function row(name, fn) {
  const r0 = rssMiB(), c0 = cpuS();
  const out = await fn();
  await sleep(300);
  console.log(JSON.stringify({ row: name, ...out, rss_mib: `${r0.toFixed(0)} -> ${rssMiB().toFixed(0)}`, cpu_s: +(cpuS() - c0).toFixed(2) }));
}

const bomb = zlib.gzipSync(Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.alloc(200 << 20, 0x61), Buffer.from('"}]}')]), { level: 9 });
const bombHead = (withKey) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${withKey ? auth : ''}Content-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: ${bomb.length}\r\n\r\n`;

await row(`gzip bomb (${(bomb.length / 1024).toFixed(0)} KB -> 200 MB), no key`, () =>
  attack(async (w) => { await w(bombHead(false)); await w(bomb); }));
if (key)
  await row('gzip bomb, with the key', () => attack(async (w) => { await w(bombHead(true)); await w(bomb); }));
await row('chunked body, 300 MB offered', () =>
  attack(async (w, stop) => {
    await w(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\n`);
    const piece = Buffer.alloc(1 << 20, 0x61);
    for (let i = 0; i < 300 && !stop(); ++i) await w(Buffer.concat([Buffer.from('100000\r\n'), piece, Buffer.from('\r\n')]));
  }));
await row('headers, 141 MB offered', () =>
  attack(async (w, stop) => {
    await w('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
    const line = Buffer.from(`X-Pad: ${'p'.repeat(1 << 20)}\r\n`);
    for (let i = 0; i < 141 && !stop(); ++i) await w(line);
  }));
await row('two different Content-Length', () =>
  attack(async (w) => w(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}`)));
await row('Content-Length with Transfer-Encoding', () =>
  attack(async (w) => w(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`)));
await row('pipelining: 3 requests in one write', () =>
  new Promise((resolve) => {
    const sock = net.connect({ host: hostname, port: Number(port) }, () =>
      sock.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(2) + 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    let got = '';
    sock.on('data', (d) => (got += d));
    sock.on('close', () => resolve({ answered: (got.match(/HTTP\/1\.1 200/g) || []).length, of: 3 }));
  }));
await row('70 connections trickling a header byte every 3 s, then /health', async () => {
  const socks = await Promise.all(Array.from({ length: 70 }, () => new Promise((r) => {
    const s = net.connect({ host: hostname, port: Number(port) }, () => r(s));
    s.on('error', () => {});
  })));
  const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n';
  for (const s of socks) s.write(head[0]);
  await sleep(3000);
  for (const s of socks) s.write(head[1]);
  const t0 = Date.now();
  const h = await fetch(`${url}/health`).then((r) => r.status).catch((e) => e.cause?.code ?? 'error');
  const healthMs = Date.now() - t0;
  for (const s of socks) s.destroy();
  return { health: h, health_ms: healthMs };
});
await row('burst: 128 and 512 connections opened at once, GET /health each', async () => {
  const out = {};
  for (const n of [128, 512]) {
    const t0 = Date.now();
    const res = await Promise.all(Array.from({ length: n }, () => new Promise((resolve) => {
      const s = net.connect({ host: hostname, port: Number(port) }, () => s.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
      let got = '';
      const timer = setTimeout(() => { s.destroy(); resolve('timeout'); }, 15000);
      s.on('data', (d) => (got += d));
      s.on('error', (e) => { clearTimeout(timer); resolve(e.code); });
      s.on('close', () => { clearTimeout(timer); resolve(/^HTTP\/1\.1 200/.test(got) ? 200 : 'bad'); });
    })));
    out[`burst_${n}`] = `${res.filter((x) => x === 200).length}/${n} in ${Date.now() - t0} ms`;
  }
  return out;
});
await row('1,000 requests on fresh connections, 64 at a time: resets', async () => {
  let next = 0, ok = 0, reset = 0;
  await Promise.all(Array.from({ length: 64 }, async () => {
    while (next < 1000) {
      next++;
      const r = await new Promise((resolve) => {
        const s = net.connect({ host: hostname, port: Number(port) }, () => s.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
        let got = '';
        s.on('data', (d) => (got += d));
        s.on('error', (e) => resolve(e.code));
        s.on('close', () => resolve(/^HTTP\/1\.1 200/.test(got) ? 200 : 'bad'));
      });
      if (r === 200) ok++;
      else reset++;
    }
  }));
  return { ok, failed: reset };
});
