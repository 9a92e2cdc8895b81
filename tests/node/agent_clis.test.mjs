// Real coding-agent CLIs against `hyperstream serve`, each alone with the server in a network
// namespace that has only loopback, with a scratch HOME and their telemetry and update checks
// off: Claude Code (default mode, /v1/messages), Codex CLI (`exec`, a custom provider on the
// Responses API) and Qwen Code (/v1/chat/completions). Each runs a scripted one-shot task with a
// tool call: the server's --test-force-script makes the random built-in model call the CLI's
// file-reading tool, then answer once the file's contents (a random word) come back, which only
// the CLI running the tool can bring. Prompts are real (18-50K tokens); --test-prefill-tail
// keeps their prefill short, since the output is forced anyway.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';

import { netnsSupport, scratchDir, runInNetns, dsmlCall } from './_netns.mjs';
import { MODEL } from './_server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const bin = (p) => path.join(here, 'node_modules', p);
const ns = netnsSupport();
const skip = ns.reason ? `skipped: ${ns.reason}` : false;
const PATH = `${path.dirname(process.execPath)}:/usr/bin:/bin`;
const TASK = 'Read notes.txt and tell me the secret word.';

// A scratch HOME and working directory, the file with the secret, and the server's script.
function setup(name, { think = false, hold = 0 } = {}) {
  const s = scratchDir(`hs-${name}-`);
  const home = path.join(s.dir, 'home');
  const work = path.join(s.dir, 'work');
  fs.mkdirSync(home);
  fs.mkdirSync(work);
  const word = 'w' + randomBytes(6).toString('hex');
  const notes = path.join(work, 'notes.txt');
  fs.writeFileSync(notes, `the secret word is ${word}\n`);
  const answer = `The secret word is ${word}.`;
  const pre = (text) => (think ? `${text}</think>` : ''); // thinking mode: reasoning first
  return {
    ...s,
    home,
    work,
    notes,
    word,
    answer,
    script: (toolName, args) => {
      const file = path.join(s.dir, 'script.json');
      fs.writeFileSync(
        file,
        JSON.stringify([
          { when: word, output: pre('I have it.') + answer },
          { when: 'Read notes.txt', output: pre('I will read the file.') + 'Reading notes.txt.' + dsmlCall(toolName, args), hold_ms: hold },
          { output: pre('Nothing to do.') + 'OK.' }, // the CLIs' side requests (titles, memory)
        ]),
      );
      return file;
    },
  };
}

const serverArgs = (script, extra) => ['--ctx-size', '65536', '--test-prefill-tail', '512', '--test-force-script', script, ...extra];
// Whole prompts prefilled (no tail), so that the prefix cache has real states to keep.
const cachedServerArgs = (script) => ['--ctx-size', '65536', '--threads', '2', '--test-force-script', script];
const claudeEnv = (home) => ({
  PATH,
  HOME: home,
  TERM: 'dumb',
  ANTHROPIC_BASE_URL: '$URL',
  ANTHROPIC_API_KEY: 'sk-hs-test',
  DISABLE_TELEMETRY: 1,
  DISABLE_ERROR_REPORTING: 1,
  DISABLE_AUTOUPDATER: 1,
  DISABLE_BUG_COMMAND: 1,
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: 1,
  // Its byte watchdog at its shortest (10 s): a silent stream is abandoned after that.
  CLAUDE_ENABLE_BYTE_WATCHDOG: 1,
  CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS: 10000,
});

// Codex's environment and its config: a custom provider on the Responses API, no retries,
// analytics, feedback and OpenTelemetry off. `extra` adds provider settings.
function codexJob(s, extra = '') {
  const codexHome = path.join(s.home, '.codex');
  fs.mkdirSync(codexHome);
  const config = `model = "${MODEL}"
model_provider = "hyperstream"
check_for_update_on_startup = false

[model_providers.hyperstream]
name = "hyperstream"
base_url = "$URL/v1"
wire_api = "responses"
env_key = "HS_API_KEY"
stream_max_retries = 0
${extra}

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
metrics_exporter = "none"
trace_exporter = "none"
`;
  return {
    env: { PATH, HOME: s.home, CODEX_HOME: codexHome, HS_API_KEY: 'sk-hs-test', TERM: 'dumb' },
    files: { [path.join(codexHome, 'config.toml')]: config },
  };
}

// Runs `job` in the setup's working directory; checks the namespace and the server's exit.
async function runCli(s, job) {
  const r = await runInNetns(ns.flags, { cwd: s.work, timeoutMs: 120000, ...job }, s.dir);
  assert.deepEqual(r.links, ['lo'], 'the namespace has only loopback');
  assert.equal(r.serverExit, 0, r.serverLog);
  return r;
}

// Claude Code on the one-shot task, with the server's keep-alive interval `keepalive` (s).
function runClaude(s, keepalive) {
  return runCli(s, {
    serverArgs: serverArgs(s.script('Read', { file_path: s.notes }), ['--keepalive', String(keepalive)]),
    command: bin('@anthropic-ai/claude-code/bin/claude.exe'),
    args: ['-p', TASK, '--output-format', 'json'],
    env: claudeEnv(s.home),
  });
}

test('Claude Code (default mode) reads a file with its Read tool and answers; keep-alives hold its stream', { skip }, async () => {
  const s = setup('claude', { think: true, hold: 12500 });
  try {
    const r = await runClaude(s, 1);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const out = JSON.parse(r.stdout);
    assert.equal(out.result, s.answer);
    assert.equal(out.is_error, false);
    const msgs = r.access.filter((a) => a.path === '/v1/messages');
    // Claude Code asks for 128000 output tokens; our Anthropic-worded 400 makes it retry with fewer.
    const over = msgs.filter((a) => a.status === 400);
    assert.ok(over.length >= 1);
    for (const a of over) assert.match(a.error, /^input length and `max_tokens` exceed context limit: \d+ \+ \d+ > 65536, decrease/);
    const ok = msgs.filter((a) => a.status === 200);
    assert.deepEqual(ok.map((a) => a.finish), ['tool_calls', 'stop']);
    assert.ok(ok.every((a) => a.stream && !a.disconnected), JSON.stringify(ok));
    assert.ok(ok[0].ms >= 12500 && ok[0].prompt_tokens > 10000, JSON.stringify(ok[0])); // 12.5 s without a token
  } finally {
    s.cleanup();
  }
});

test('without keep-alives Claude Code abandons the silent stream and prefills again without streaming', { skip }, async () => {
  const s = setup('claude-quiet', { think: true, hold: 12500 });
  try {
    const r = await runClaude(s, 0);
    const ok = r.access.filter((a) => a.path === '/v1/messages' && a.status === 200);
    assert.ok(ok.some((a) => a.stream && a.disconnected), JSON.stringify(ok));
    assert.ok(ok.some((a) => !a.stream), JSON.stringify(ok));
  } finally {
    s.cleanup();
  }
});

// Codex's own idle watchdog is set short: the held 4 s "prefill" needs keep-alives to survive it.
test('Codex CLI (exec, Responses API) thinks, runs a shell command and answers; unsupported tools are left out', { skip }, async () => {
  const s = setup('codex', { hold: 4000, think: true });
  try {
    const r = await runCli(s, {
      serverArgs: serverArgs(s.script('exec_command', { cmd: 'cat notes.txt' }), ['--keepalive', '0.5']),
      command: bin('.bin/codex'),
      // With an effort the answers start in reasoning: reasoning items go out and come back.
      args: ['exec', '-c', 'model_reasoning_effort="high"', '--skip-git-repo-check', TASK],
      ...codexJob(s, 'stream_idle_timeout_ms = 2000'),
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), s.answer, r.stderr);
    const calls = r.access.filter((a) => a.path === '/v1/responses');
    assert.deepEqual(calls.map((a) => [a.status, a.stream, a.finish, !!a.disconnected]), [
      [200, true, 'tool_calls', false],
      [200, true, 'stop', false],
    ]);
    assert.ok(calls[0].ms >= 4000, JSON.stringify(calls[0]));
    assert.match(r.serverLog, /the web_search tool is not one this server can run/);
  } finally {
    s.cleanup();
  }
});

test('Qwen Code (chat completions) reads a file with read_file and answers; --clamp-max-tokens fits its 32K reserve', { skip }, async () => {
  const s = setup('qwen');
  try {
    const settings = { telemetry: { enabled: false }, privacy: { usageStatisticsEnabled: false }, general: { enableAutoUpdate: false } };
    const qwenDir = path.join(s.home, '.qwen');
    fs.mkdirSync(qwenDir);
    const r = await runCli(s, {
      serverArgs: serverArgs(s.script('read_file', { file_path: s.notes }), ['--clamp-max-tokens']),
      command: process.execPath,
      args: [bin('@qwen-code/qwen-code/cli-entry.js'), '--auth-type', 'openai', '--openai-base-url', '$URL/v1', '--openai-api-key', 'sk-hs-test',
             '-m', MODEL, '--yolo', TASK],
      env: { PATH, HOME: s.home, TERM: 'dumb', QWEN_CODE_SUPPRESS_YOLO_WARNING: 1 },
      files: { [path.join(qwenDir, 'settings.json')]: JSON.stringify(settings) },
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), s.answer, r.stderr);
    const calls = r.access.filter((a) => a.path === '/v1/chat/completions' && a.finish !== undefined);
    assert.ok(calls.length >= 2, JSON.stringify(calls));
    assert.deepEqual(calls.slice(0, 2).map((a) => [a.status, a.stream, a.finish]), [[200, true, 'tool_calls'], [200, true, 'stop']]);
    // Qwen Code reserves 32000 output tokens: without the clamp this prompt would be refused.
    assert.ok(calls[0].prompt_tokens + 32000 > 65536, JSON.stringify(calls[0]));
  } finally {
    s.cleanup();
  }
});

// The prefix cache with the real CLIs: their second request (the tool's result sent back) is a
// prefix extension of the first, so it computes only what the turn added; the CLI reads the
// cached count in the usage it gets back (asserted here through the access log, which logs the
// same usage the response carried).
test('Claude Code: the second turn of a session is served from the prefix cache', { skip }, async () => {
  const s = setup('claude-cache', { think: true });
  try {
    const r = await runCli(s, {
      serverArgs: cachedServerArgs(s.script('Read', { file_path: s.notes })),
      command: bin('@anthropic-ai/claude-code/bin/claude.exe'),
      args: ['-p', TASK, '--output-format', 'json'],
      env: claudeEnv(s.home),
      timeoutMs: 400000, // a whole prefill of its ~30K-token prompt on the CPU
    });
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.equal(JSON.parse(r.stdout).result, s.answer);
    const ok = r.access.filter((a) => a.path === '/v1/messages' && a.status === 200 && a.finish);
    const [first, second] = [ok.find((a) => a.finish === 'tool_calls'), ok.find((a) => a.finish === 'stop' && a.prompt_tokens > 10000)];
    assert.ok(first && second, JSON.stringify(ok));
    console.log('[prefix-cache] Claude Code:', JSON.stringify(ok.map((a) => [a.prompt_tokens, a.cached_tokens, a.finish])));
    assert.ok(second.cached_tokens >= first.prompt_tokens, JSON.stringify([first, second]));
  } finally {
    s.cleanup();
  }
});

test('Codex CLI: the second turn of a session is served from the prefix cache', { skip }, async () => {
  const s = setup('codex-cache');
  try {
    const r = await runCli(s, {
      serverArgs: cachedServerArgs(s.script('exec_command', { cmd: 'cat notes.txt' })),
      command: bin('.bin/codex'),
      args: ['exec', '--skip-git-repo-check', TASK],
      ...codexJob(s),
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), s.answer, r.stderr);
    const calls = r.access.filter((a) => a.path === '/v1/responses' && a.status === 200);
    console.log('[prefix-cache] Codex:', JSON.stringify(calls.map((a) => [a.prompt_tokens, a.cached_tokens, a.finish])));
    assert.equal(calls.length, 2);
    assert.ok(calls[1].cached_tokens >= calls[0].prompt_tokens, JSON.stringify(calls));
  } finally {
    s.cleanup();
  }
});
