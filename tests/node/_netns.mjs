// Runs a real agent CLI against `hyperstream serve`, both inside a network namespace that has
// only loopback (unshare -n, or -rn as an unprivileged user, then `ip link set lo up`): nothing
// the CLI or the server does can reach another machine. _agent_driver.mjs is what runs inside.
import { spawnSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

// The unshare flags that make a loopback-only namespace here, or {reason} why none can be made.
export function netnsSupport() {
  for (const flags of process.getuid?.() === 0 ? [['-n'], ['-rn']] : [['-rn']]) {
    const r = spawnSync('unshare', [...flags, 'ip', 'link', 'set', 'lo', 'up'], { encoding: 'utf8' });
    if (r.status === 0) return { flags };
    if (r.error) return { reason: `unshare or ip is missing: ${r.error.message}` };
    if (flags.at(-1) === '-rn') return { reason: `cannot make a network namespace: ${(r.stderr || '').trim()}` };
  }
  return { reason: 'cannot make a network namespace' };
}

// A scratch directory (removed by the returned cleanup).
export function scratchDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  return { dir, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

// Runs `job` ({serverArgs, command, args, env, files, cwd, timeoutMs}) in a fresh namespace; resolves
// with what _agent_driver.mjs reports: {links, code, stdout, stderr, access, serverLog, ms}.
export async function runInNetns(flags, job, scratch) {
  const jobFile = path.join(scratch, 'job.json');
  const resultFile = path.join(scratch, 'result.json');
  fs.writeFileSync(jobFile, JSON.stringify({ ...job, resultFile }));
  const child = spawn('unshare', [...flags, process.execPath, path.join(here, '_agent_driver.mjs'), jobFile], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH, HS_CLI: process.env.HS_CLI },
  });
  let log = '';
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  const [code] = await once(child, 'exit');
  if (code !== 0 || !fs.existsSync(resultFile)) throw new Error(`the namespace driver failed (${code}):\n${log}`);
  return JSON.parse(fs.readFileSync(resultFile, 'utf8'));
}

// The DSML block that calls `name` with string arguments (docs/chat-format.md §6).
export function dsmlCall(name, args) {
  const params = Object.entries(args).map(([k, v]) => `<｜DSML｜parameter name="${k}" string="true">${v}</｜DSML｜parameter>`);
  return `\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="${name}">\n${params.join('\n')}\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>`;
}
