// Runs inside the loopback-only namespace that _netns.mjs makes: brings loopback up, starts
// `hyperstream serve` (HS_CLI), runs one agent CLI with exactly the environment the job gives
// (a scratch HOME, telemetry off) and the config files it gives, stops the server and writes
// what happened to job.resultFile.
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';

import { startServer } from './_server.mjs';

const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
execFileSync('ip', ['link', 'set', 'lo', 'up']);
// The interfaces there are (only "lo" is expected).
const links = execFileSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' })
  .split('\n')
  .filter(Boolean)
  .map((l) => l.split(':')[1].trim());

const server = await startServer(job.serverArgs, { threads: 2, log: 'warn' });
// "$URL" in the environment, the arguments and the config files stands for the server's address.
const env = {};
for (const [k, v] of Object.entries(job.env)) env[k] = String(v).replaceAll('$URL', server.url);
for (const [file, text] of Object.entries(job.files ?? {})) fs.writeFileSync(file, text.replaceAll('$URL', server.url));
const t0 = Date.now();
const args = job.args.map((a) => a.replaceAll('$URL', server.url));
const cli = spawn(job.command, args, { cwd: job.cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
let stdout = '', stderr = '';
cli.stdout.on('data', (d) => (stdout += d));
cli.stderr.on('data', (d) => (stderr += d));
const timer = setTimeout(() => cli.kill('SIGKILL'), job.timeoutMs);
const [code, signal] = await once(cli, 'exit');
clearTimeout(timer);
const ms = Date.now() - t0;
const access = server.accessLog().filter((a) => a.path !== '/health');
const stopped = await server.stop();
fs.writeFileSync(
  job.resultFile,
  JSON.stringify({ links, code, signal, stdout, stderr, ms, access, serverLog: server.stderr(), serverExit: stopped.code }),
);
