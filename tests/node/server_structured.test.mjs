// Structured output on the random-weight built-in model: schemas written in zod, turned into
// JSON Schema by the openai SDK's zodResponseFormat / zodFunction (strict) or by zod's own
// z.toJSONSchema, sent through the openai SDK; every answer must parse and validate, checked by
// ajv (with ajv-formats) against the schema that was sent and by zod itself. Unsupported schema
// features get a 400 naming them; a forced tool call yields valid arguments.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat, zodFunction } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';

import { startServer, metric, MODEL } from './_server.mjs';

let server;
let client;
before(async () => {
  // Random weights write long strings (a string ends only when '"' is drawn), hence the room.
  server = await startServer(['--ctx-size', '16384', '--max-seqs', '8'], { threads: 2 });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0);
});

// zod's own formats (cuid, nanoid, starts_with, ...) are unknown to ajv: their patterns carry them.
const ajv = new Ajv({ strict: false, allErrors: true, logger: false });
addFormats(ajv);
const messages = [{ role: 'user', content: 'Answer in JSON.' }];
const MAX_TOKENS = 14000;

const Node = z.object({ label: z.string().max(8), get children() { return z.array(Node).max(1); } });
const Address = z.object({ street: z.string(), city: z.string().max(20), zip: z.string().regex(/^\d{5}$/) });

// Strict schemas (every field required): sent as the SDK's zodResponseFormat, parsed by the SDK.
const STRICT = {
  person: z.object({ name: z.string(), age: z.int().min(0).max(130), email: z.email() }),
  enums: z.object({ color: z.enum(['red', 'green', 'blue']), size: z.literal('XL'), n: z.literal(3) }),
  nested: z.object({ user: z.object({ id: z.uuid(), address: Address }) }),
  list: z.object({ items: z.array(z.object({ sku: z.string().max(12), qty: z.int().positive() })).min(1).max(4) }),
  union: z.object({ value: z.union([z.string().max(10), z.number()]) }),
  discriminated: z.object({
    shape: z.discriminatedUnion('kind', [
      z.object({ kind: z.literal('circle'), radius: z.number().positive() }),
      z.object({ kind: z.literal('rect'), w: z.number().min(0), h: z.number().min(0) }),
    ]),
  }),
  dates: z.object({ day: z.iso.date(), at: z.iso.datetime(), clock: z.iso.time() }),
  bounded_strings: z.object({ code: z.string().min(2).max(4), note: z.string().max(30), tag: z.string().length(3) }),
  numbers: z.object({ p: z.number().positive(), unit: z.number().min(0).max(1), neg: z.number().lt(0), gt: z.number().gt(1.5) }),
  ints: z.object({ a: z.int(), b: z.int().nonnegative(), c: z.int().min(-20).max(-10), d: z.int().lte(5) }),
  pattern: z.object({ ticket: z.string().regex(/^[A-Z]{3}-\d{2,4}$/), slug: z.string().regex(/^[a-z0-9]+(?:-[a-z0-9]+)*$/).max(16) }),
  flags: z.object({ on: z.boolean(), off: z.boolean(), maybe: z.boolean().nullable() }),
  fixed_array: z.object({ pair: z.array(z.enum(['x', 'y', 'z'])).length(2) }),
  tree: z.object({ root: Node }),
  deep: z.object({ a: z.object({ b: z.object({ c: z.object({ d: z.array(z.int().max(9)).max(3) }) }) }) }),
  nullables: z.object({ s: z.string().max(5).nullable(), o: z.object({ x: z.int() }).nullable() }),
  defaults: z.object({ mode: z.enum(['fast', 'slow']).default('fast'), retries: z.int().min(0).max(5).default(3) }),
  affixes: z.object({ a: z.string().startsWith('id_').max(10), b: z.string().endsWith('.json').max(12), c: z.string().includes('@').max(9) }),
  network: z.object({ ip: z.ipv4(), site: z.url() }),
  matrix: z.object({ rows: z.array(z.array(z.number()).max(3)).max(3) }),
  many_enum: z.object({ month: z.enum(['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec']) }),
  ids: z.object({ cuid: z.cuid(), nano: z.nanoid(), lower: z.string().lowercase().max(12) }),
  tuple_like: z.object({ point: z.array(z.number()).length(3), label: z.string().max(6) }),
};

// Non-strict schemas (optional fields, records, open objects, intersections, tuples): zod's own
// JSON Schema, sent as a plain response_format.
const LOOSE = {
  optional: z.object({ title: z.string().max(10), subtitle: z.string().max(10).optional(), year: z.int().min(1900).max(2100).optional() }),
  record: z.object({ scores: z.record(z.string(), z.int().min(0).max(100)) }),
  passthrough: z.object({ id: z.int() }).loose(),
  catchall: z.object({ id: z.int() }).catchall(z.boolean()),
  intersection: z.intersection(z.object({ a: z.string().max(5) }), z.object({ b: z.int() })),
  tuple: z.object({ t: z.tuple([z.string().max(4), z.int(), z.boolean()]) }),
  nullish: z.object({ n: z.string().max(4).nullish(), m: z.array(z.string().max(3)).optional() }),
  any_field: z.object({ anything: z.any(), known: z.null() }),
  top_array: z.array(z.object({ k: z.enum(['a', 'b']), v: z.number() })).max(3),
  top_union: z.union([z.object({ ok: z.literal(true), data: z.string().max(8) }), z.object({ ok: z.literal(false), error: z.int() })]),
};

function check(name, schema, text, zodSchema) {
  let value;
  assert.doesNotThrow(() => (value = JSON.parse(text)), `${name}: not JSON: ${text.slice(0, 300)}`);
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${name}: ${ajv.errorsText(validate.errors)} in ${text.slice(0, 400)}`);
  const parsed = zodSchema.safeParse(value);
  assert.ok(parsed.success, `${name}: zod: ${parsed.error?.message} in ${text.slice(0, 400)}`);
  return value;
}

// Runs `jobs` (async functions) at most `width` at a time.
async function pool(jobs, width = 8) {
  const out = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < jobs.length) {
        const i = next++;
        out[i] = await jobs[i]();
      }
    }),
  );
  return out;
}

test('33 zod schemas: every random-weight answer parses and validates (ajv and zod)', async () => {
  const jobs = [];
  Object.entries(STRICT).forEach(([name, schema], i) =>
    jobs.push(async () => {
      const format = zodResponseFormat(schema, name);
      const r = await client.chat.completions.parse({ model: MODEL, messages, max_tokens: MAX_TOKENS, seed: 100 + i, response_format: format });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `${name}: ${c.finish_reason} after ${r.usage.completion_tokens} tokens`);
      check(name, format.json_schema.schema, c.message.content, schema);
      assert.ok(c.message.parsed !== null && typeof c.message.parsed === 'object', `${name}: the SDK did not parse it`);
      return r.usage.completion_tokens;
    }),
  );
  Object.entries(LOOSE).forEach(([name, schema], i) =>
    jobs.push(async () => {
      const js = z.toJSONSchema(schema, { target: 'draft-7' });
      const r = await client.chat.completions.create({
        model: MODEL,
        messages,
        max_tokens: MAX_TOKENS,
        seed: 200 + i,
        response_format: { type: 'json_schema', json_schema: { name, schema: js } },
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `${name}: ${c.finish_reason} after ${r.usage.completion_tokens} tokens`);
      check(name, js, c.message.content, schema);
      return r.usage.completion_tokens;
    }),
  );
  assert.ok(jobs.length >= 30);
  const tokens = await pool(jobs);
  assert.equal(await metric(server, 'hyperstream_constrained_tokens_total') >= tokens.reduce((a, b) => a + b, 0), true);
});

test('json_object: any JSON object, also streamed and in thinking mode', async () => {
  const results = await pool(
    [0, 1, 2].map((seed) => async () => {
      const r = await client.chat.completions.create({
        model: MODEL, messages, max_tokens: MAX_TOKENS, seed, response_format: { type: 'json_object' },
      });
      return r.choices[0].message.content;
    }),
  );
  for (const text of results) {
    const v = JSON.parse(text);
    assert.ok(v && typeof v === 'object' && !Array.isArray(v), text.slice(0, 200));
  }
  // Streamed: the deltas concatenate to the same kind of value.
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: MAX_TOKENS, seed: 9, stream: true,
    response_format: zodResponseFormat(STRICT.enums, 'enums'),
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'stop');
  check('stream', zodResponseFormat(STRICT.enums, 'enums').json_schema.schema, text, STRICT.enums);
  // Thinking: free reasoning first, then the constrained answer as content.
  const r = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: MAX_TOKENS, seed: 4, chat_template_kwargs: { thinking: true },
    response_format: zodResponseFormat(STRICT.flags, 'flags'),
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(typeof m.reasoning_content, 'string');
  check('thinking', zodResponseFormat(STRICT.flags, 'flags').json_schema.schema, m.content, STRICT.flags);
});

test('a forced tool call (tool_choice naming it) has arguments valid for its parameters', async () => {
  const params = z.object({
    city: z.string().max(24),
    unit: z.enum(['celsius', 'fahrenheit']),
    days: z.int().min(1).max(7),
    hourly: z.boolean().nullable(),
  });
  const tool = zodFunction({ name: 'get_forecast', parameters: params });
  const other = zodFunction({ name: 'other', parameters: z.object({ q: z.string() }) });
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.parse({
      model: MODEL, messages, max_tokens: MAX_TOKENS, seed, tools: [other, tool],
      tool_choice: { type: 'function', function: { name: 'get_forecast' } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.function.name, 'get_forecast');
    check('tool', tool.function.parameters, call.function.arguments, params);
    assert.deepEqual(call.function.parsed_arguments, JSON.parse(call.function.arguments));
  }
});

test('unsupported schema features get a 400 naming them', async () => {
  const cases = [
    [{ type: 'object', patternProperties: { '^x': { type: 'string' } } }, /patternProperties/],
    [{ type: 'array', items: { type: 'string' }, uniqueItems: true }, /uniqueItems/],
    [{ not: { type: 'string' } }, /'not'/],
    [{ type: 'object', properties: { a: { if: { type: 'string' }, then: { minLength: 2 } } } }, /'if'.*#\/properties\/a/],
    [{ type: 'integer', multipleOf: 5 }, /multipleOf/],
    [z.toJSONSchema(z.object({ e: z.emoji() }), { target: 'draft-7' }), /lookahead/],
    [{ type: 'string', format: 'color' }, /format 'color'/],
    [{ $ref: 'https://example.com/s.json' }, /only local \$ref/],
    [{ type: 'string', pattern: '(a)\\1' }, /backreference/],
  ];
  for (const [schema, want] of cases) {
    await assert.rejects(
      client.chat.completions.create({
        model: MODEL, messages, max_tokens: 16, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
      }),
      (e) => {
        assert.equal(e.status, 400, e.message);
        assert.equal(e.param, 'response_format');
        assert.match(e.message, want);
        return true;
      },
    );
  }
  // The same for a forced tool call's parameters.
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL, messages, max_tokens: 16,
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { not: {} } } } } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
    }),
    (e) => e.status === 400 && e.param === 'tool_choice' && /'not'/.test(e.message) && /'f'/.test(e.message),
  );
});
