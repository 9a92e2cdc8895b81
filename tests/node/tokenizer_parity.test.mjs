// Parity of `hyperstream tokenize/detokenize` with Hugging Face's tokenizers on the corpus
// tests/data/tokenizer/corpus.jsonl: the Rust library (npm `tokenizers`, the reference of
// docs/tokenizer.md) and the pure-JS @huggingface/tokenizers must agree with each other and with
// us, loading our tokenizer from tokenizer.json, a model directory, and a GGUF written from it.
// Run by CTest with HS_CLI (the binary) and HS_TEST_DATA (tests/data).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { Tokenizer } from "@huggingface/tokenizers";
import { v4Text } from "../../scripts/gen_v4_tokenizer.mjs";

const CLI = process.env.HS_CLI;
const DATA = process.env.HS_TEST_DATA ?? path.resolve(import.meta.dirname, "../data");
const TOK = path.join(DATA, "tokenizer");
const V4_JSON = path.join(TOK, "v4/tokenizer.json");
if (!CLI) throw new Error("HS_CLI must name the hyperstream binary");

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "hs-tok-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
const corpusFile = path.join(TOK, "corpus.jsonl");
const corpus = fs.readFileSync(corpusFile, "utf8").split("\n").filter(l => l.length).map(l => JSON.parse(l));
const readJsonl = f => fs.readFileSync(f, "utf8").split("\n").filter(l => l.length).map(l => JSON.parse(l));
const hs = (...args) => execFileSync(CLI, args, { encoding: "utf8", maxBuffer: 1 << 28 });

const hf = new Tokenizer(JSON.parse(fs.readFileSync(V4_JSON, "utf8")),
  JSON.parse(fs.readFileSync(path.join(TOK, "v4/tokenizer_config.json"), "utf8")));
const expected = corpus.map(s => hf.encode(s, { add_special_tokens: false }).ids);
const { Tokenizer: RustTokenizer } = createRequire(import.meta.url)("tokenizers");

function compareIds(got, label) {
  assert.equal(got.length, corpus.length, `${label}: line count`);
  const bad = [];
  for (let i = 0; i < corpus.length; i++)
    if (JSON.stringify(got[i]) !== JSON.stringify(expected[i])) bad.push(i);
  const show = bad.slice(0, 5).map(i => `line ${i + 1} ${JSON.stringify(corpus[i]).slice(0, 120)}\n  ours ${JSON.stringify(got[i]).slice(0, 200)}\n  hf   ${JSON.stringify(expected[i]).slice(0, 200)}`);
  assert.equal(bad.length, 0, `${label}: ${bad.length} of ${corpus.length} strings differ\n${show.join("\n")}`);
}

test("fixture copies and the V4 tokenizer.json are what they claim", () => {
  const sha = f => crypto.createHash("sha256").update(fs.readFileSync(path.join(TOK, f))).digest("hex");
  // sha256 of the files in shared/fixtures/tokenizer and fixtures/chat they were copied from.
  assert.equal(sha("v3_text_vectors.jsonl"), "b3d4a2f09bfdf2b5a1d0c55902104d154e04294bf544a9e18cddfbe4cd2a6d8c");
  assert.equal(sha("v3_fuzz_vectors.jsonl"), "021595d5943c22247fb97068fd69accd463a32a417a5a45cb3d6d5782207837c");
  assert.equal(sha("v4_synth_vectors.jsonl"), "c4e366091a346b4d6dde73e1e5675a877e2507c68c0dc3999b87d908f8247511");
  assert.equal(sha("v4_added_tokens.json"), "8cb0f2286f020573d64850f57a2760c37b0e52b86ff9bcdc254776f2e36599ec");
  assert.equal(sha("chat/test_output_1.txt"), "9b366d9d2eac842a6e890594aac0b58648e5623717202b33497afadf03e26540");
  assert.equal(sha("chat/test_output_2.txt"), "ca66b01a1ac3a204bb032c928fb607d4877171e998a50f7f89f39fa821b75665");
  assert.equal(sha("chat/test_output_3.txt"), "b3b1cd8748b7b90d3c6be6da3f786f12e4d70be073bd445ea162dfad4dc01a64");
  assert.equal(sha("chat/test_output_4.txt"), "60e1643840ba9e4aeede450feb7b0498fa66ee24e4a939d48855ce04ec6fc375");
  assert.equal(sha("v4/tokenizer_config.json"), "6ac8c8dc065ed118161d02dd532749ae3f52c243deac27872134fae2f50d8547");
  // Rebuilt from the npm V3 file (sha256-checked inside) + v4_added_tokens.json.
  assert.ok(fs.readFileSync(V4_JSON, "utf8") === v4Text(), "tokenizer.json is stale: run node scripts/gen_v4_tokenizer.mjs");
});

test("the corpus is large; HF's Rust and JS tokenizers agree on it and on the fixtures", async () => {
  assert.ok(corpus.length >= 2000, `corpus has ${corpus.length} strings`);
  const rs = RustTokenizer.fromFile(V4_JSON);
  for (let i = 0; i < corpus.length; i++) {
    const ids = Array.from((await rs.encode(corpus[i], null, { addSpecialTokens: false })).getIds());
    assert.deepEqual(ids, expected[i], `rust/js disagree on line ${i + 1}`);
  }
  for (const v of readJsonl(path.join(TOK, "v4_synth_vectors.jsonl"))) {
    const text = v.text ?? fs.readFileSync(path.join(TOK, "chat", v.file), "utf8");
    assert.deepEqual(hf.encode(text, { add_special_tokens: false }).ids, v.ids, JSON.stringify(text).slice(0, 80));
  }
});

test("every code point in context splits as in HF's Rust library (Unicode tables)", async () => {
  // Each code point between letters, after punctuation, before a digit and after spaces, so its
  // category (L M N P S, White_Space, unassigned) decides the pieces. Planes 0-3 and 14 whole,
  // the rest sampled.
  const cps = [];
  for (let c = 0; c <= 0x10ffff; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    if (c < 0x40000 || (c >= 0xe0000 && c < 0xe1000) || c % 97 === 0) cps.push(c);
  }
  const lines = [];
  for (let i = 0; i < cps.length; i += 64)
    lines.push(cps.slice(i, i + 64).map(c => { const x = String.fromCodePoint(c); return `a${x}b ${x}${x}.${x}7 ${x}`; }).join(" "));
  const inp = path.join(tmp, "sweep.jsonl"), out = path.join(tmp, "sweep_ids.jsonl");
  fs.writeFileSync(inp, lines.map(l => JSON.stringify(l)).join("\n") + "\n");
  hs("tokenize", V4_JSON, "--in", inp, "--out", out);
  const ours = readJsonl(out);
  assert.equal(ours.length, lines.length);
  const rs = RustTokenizer.fromFile(V4_JSON);
  const bad = [];
  for (let i = 0; i < lines.length; i++) {
    const want = Array.from((await rs.encode(lines[i], null, { addSpecialTokens: false })).getIds());
    if (JSON.stringify(want) !== JSON.stringify(ours[i])) bad.push(cps[i * 64].toString(16));
  }
  assert.equal(bad.length, 0, `${bad.length} of ${lines.length} blocks differ, starting at U+${bad.slice(0, 10).join(", U+")}`);
});

test("tokenize from tokenizer.json gives HF's ids", () => {
  const out = path.join(tmp, "ids_json.jsonl");
  hs("tokenize", V4_JSON, "--in", corpusFile, "--out", out);
  compareIds(readJsonl(out), "tokenizer.json");
});

test("tokenize from a model directory gives HF's ids", () => {
  const out = path.join(tmp, "ids_dir.jsonl");
  hs("tokenize", path.join(TOK, "v4"), "--in", corpusFile, "--out", out);
  compareIds(readJsonl(out), "directory");
});

test("GGUF written from tokenizer.json: same ids, lossless detokenize", () => {
  const gguf = path.join(tmp, "tok.gguf");
  hs("tokenize", V4_JSON, "--write-gguf", gguf);
  const ids = path.join(tmp, "ids_gguf.jsonl");
  hs("tokenize", gguf, "--in", corpusFile, "--out", ids);
  compareIds(readJsonl(ids), "gguf");
  const text = path.join(tmp, "text.jsonl");
  hs("detokenize", gguf, "--in", ids, "--out", text);
  const back = readJsonl(text);
  const bad = corpus.map((s, i) => i).filter(i => back[i] !== corpus[i]);
  assert.equal(bad.length, 0, `detokenize differs on ${bad.length} strings, first line ${bad[0] + 1}`);
  // HF's own decoder agrees with the original text as well (byte-level, no cleanup).
  for (let i = 0; i < corpus.length; i += 7)
    if (expected[i].length) assert.equal(hf.decode(expected[i], { clean_up_tokenization_spaces: false }), corpus[i]);
});

test("--plain leaves added-token text to BPE", () => {
  const inp = path.join(tmp, "plain.jsonl"), out = path.join(tmp, "plain_ids.jsonl");
  fs.writeFileSync(inp, JSON.stringify("<｜User｜>hi") + "\n");
  hs("tokenize", V4_JSON, "--plain", "--in", inp, "--out", out);
  const ids = readJsonl(out)[0];
  assert.ok(!ids.includes(128803) && ids.length > 2, JSON.stringify(ids));
  const text = path.join(tmp, "plain_text.jsonl");
  hs("detokenize", V4_JSON, "--in", out, "--out", text);
  assert.equal(readJsonl(text)[0], "<｜User｜>hi");
});

test("errors: one line on stderr, non-zero exit", () => {
  const run = (...args) => spawnSync(CLI, args, { encoding: "utf8" });
  const expectFail = (r, re) => {
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, re);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  };
  expectFail(run("tokenize", path.join(tmp, "missing.json"), "--in", corpusFile, "--out", path.join(tmp, "x")), /no such file/);
  const bad = path.join(tmp, "bad.jsonl");
  fs.writeFileSync(bad, "\"ok\"\n\"also ok\"\n{not json\n");
  expectFail(run("tokenize", V4_JSON, "--in", bad, "--out", path.join(tmp, "x")), /line 3/);
  fs.writeFileSync(bad, "[1,2]\n[129280]\n");
  expectFail(run("detokenize", V4_JSON, "--in", bad, "--out", path.join(tmp, "x")), /line 2.*out of range/);
  fs.writeFileSync(bad, "[1,2]\n");
  expectFail(run("detokenize", bad, "--in", bad, "--out", path.join(tmp, "x")), /malformed tokenizer JSON|model/);
  expectFail(run("tokenize", V4_JSON, "--in", path.join(tmp, "nope.jsonl"), "--out", path.join(tmp, "x")), /cannot open/);
  assert.equal(run("tokenize", "--help").status, 0);
  assert.equal(run("detokenize", "--help").status, 0);
});
