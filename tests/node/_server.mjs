// Shared helpers of the server_*.test.mjs tests: start `hyperstream serve` (HS_CLI) on a free
// port with the built-in model, wait until it is ready, talk to it, stop it.
import { spawn, execFile } from 'node:child_process';
import { once } from 'node:events';

export const CLI = process.env.HS_CLI;
if (!CLI) throw new Error('HS_CLI (the hyperstream binary) is not set; run these tests through CTest');
export const MODEL = 'hyperstream-builtin';

// Starts a server; resolves once /health answers 200. `args` are extra serve options; `log` its
// HS_LOG level; `env` more environment variables.
export async function startServer(args = [], { threads = 1, log = 'error', env = {} } = {}) {
  const proc = spawn(CLI, ['serve', '--port', '0', '--threads', String(threads), ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, HS_LOG: log, ...env },
  });
  let stderr = '';
  const exited = once(proc, 'exit');
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${stderr}`)), 30000);
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}) before listening:\n${stderr}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; ++i) {
    const r = await fetch(`${url}/health`).catch(() => null);
    if (r && r.status === 200) break;
    if (i > 600) throw new Error(`server not ready:\n${stderr}`);
    await sleep(50);
  }
  const server = {
    proc,
    port,
    url,
    stderr: () => stderr,
    // Access-log lines (JSON objects) written so far.
    accessLog: () =>
      stderr
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l))
        .filter((j) => j.type === 'access'),
    // Sends `signal` and resolves with {code, signal} once the process is gone.
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const [code, sig] = await exited;
      return { code, signal: sig };
    },
    exited,
  };
  return server;
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// POST JSON; resolves with {status, body (parsed when JSON), text, headers}.
export async function post(server, path, body, headers = {}) {
  const r = await fetch(server.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, body: json, text, headers: r.headers };
}

// The value of one sample of the Prometheus text (first match of `name` + optional labels).
export async function metric(server, name) {
  const text = await (await fetch(server.url + '/metrics')).text();
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    if (line.slice(0, sp) === name) return Number(line.slice(sp + 1));
  }
  return undefined;
}

// Waits until fn() is truthy (polling), or throws after `ms`.
export async function until(fn, ms = 5000, what = 'condition') {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

// The X-HS-Test-Force-Output header for `text` (JSON, ASCII-only so it is a legal header).
export function forceHeader(text) {
  const json = JSON.stringify(text).replace(/[\u007f-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  return { 'X-HS-Test-Force-Output': json };
}

// Runs `hyperstream <args>`; resolves with {code, stdout, stderr}.
export function runCli(args) {
  return new Promise((resolve) => {
    execFile(CLI, args, { env: { ...process.env, HS_LOG: 'error' }, maxBuffer: 1 << 24 }, (err, stdout, stderr) =>
      resolve({ code: err ? err.code : 0, stdout, stderr }),
    );
  });
}

// Reads an SSE response body to the end; resolves with the raw text.
export async function readAll(response) {
  return await response.text();
}

// Splits SSE text into [{event, data}] (data parsed unless it is [DONE]).
export function parseSse(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null;
    let data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    out.push({ event, data: data === '[DONE]' ? '[DONE]' : JSON.parse(data) });
  }
  return out;
}

// DSML markup of tool calls as the model writes it (docs/chat-format.md §6).
export function dsmlCalls(calls) {
  const inv = calls.map(
    ({ name, args }) =>
      `<｜DSML｜invoke name="${name}">\n` +
      Object.entries(args)
        .map(([k, v]) =>
          typeof v === 'string'
            ? `<｜DSML｜parameter name="${k}" string="true">${v}</｜DSML｜parameter>`
            : `<｜DSML｜parameter name="${k}" string="false">${JSON.stringify(v)}</｜DSML｜parameter>`,
        )
        .join('\n') +
      `\n</｜DSML｜invoke>`,
  );
  return `\n\n<｜DSML｜tool_calls>\n${inv.join('\n')}\n</｜DSML｜tool_calls>`;
}

export const WEATHER_TOOL_OPENAI = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: {
      type: 'object',
      properties: { location: { type: 'string' }, days: { type: 'integer' } },
      required: ['location'],
    },
  },
};

export const WEATHER_TOOL_ANTHROPIC = {
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: WEATHER_TOOL_OPENAI.function.parameters,
};
