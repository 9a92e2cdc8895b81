#!/usr/bin/env node
// Writes tests/data/tokenizer/corpus.jsonl: the parity corpus for the tokenizer (one JSON
// string per line). Deterministic (seeded xorshift); no dependencies. Usage:
//   node scripts/gen_tokenizer_corpus.mjs [OUT]
// Every string is valid UTF-8 (JSON cannot carry anything else); the C++ tests cover invalid
// bytes separately.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const OUT = process.argv[2] ?? path.join(ROOT, "tests/data/tokenizer/corpus.jsonl");

let seed = 0x2545f491;
const rand = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 4294967296; };
const int = n => Math.floor(rand() * n);
const pick = a => a[int(a.length)];
const repeat = (n, f) => Array.from({ length: n }, f);

const EN = [
  "The quick brown fox jumps over the lazy dog.", "It was the best of times, it was the worst of times.",
  "Don't panic: we'll fix it, I'm sure they're right and you've seen it.", "Mr. O'Neill's car isn't here; it's Dr. Smith's.",
  "What's the weather like in San Francisco today?", "Please summarize the following article in three bullet points.",
  "In 1969, Apollo 11 landed on the Moon; Neil Armstrong said \"That's one small step for man.\"",
  "E-mail me at first.last+tag@example.co.uk or call +1 (555) 010-9999 ext. 42.",
  "Rock 'n' roll, state-of-the-art, re-enter, co-operate — and the well-known U.S.A. vs. U.K. debate…",
  "ALL CAPS SENTENCE WITH ACRONYMS LIKE NASA, HTTP/2 AND GPU-ACCELERATED BLAS.",
  "Prices rose 3.5% to $1,234.56 (≈€1.1k) in Q3 2024; up from 2.9% YoY.",
  "Visit https://en.wikipedia.org/wiki/Byte_pair_encoding#Algorithm?x=1&y=2 for details.",
];
const EN_WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point " +
  "government company number group problem fact be have do say get make go know take see come think look want give use " +
  "find tell ask seem feel try leave call good new first last long great little own other old right big high different " +
  "small large next early young important few public bad same able to of in for on with at by from up about into over " +
  "after tokenizer inference engine model token attention expert layer weight gradient kernel cache latency throughput").split(" ");
const ZH = ["你好，世界！", "今天天气很好，我们去公园散步吧。", "深度学习模型的推理速度取决于内存带宽。", "请用中文回答下面的问题：",
  "北京是中华人民共和国的首都。", "他说：“这是一个测试。”然后离开了。", "机器学习、自然语言处理和计算机视觉", "龍鳳呈祥，萬事如意", "一二三四五六七八九十百千万亿"];
const JA = ["こんにちは、世界！", "日本語のテキストを処理します。", "ひらがな、カタカナ、漢字が混ざった文章。", "東京タワーは333メートルです。",
  "ｶﾀｶﾅ（半角）とカタカナ（全角）", "ラーメンを食べたいです。", "「吾輩は猫である。名前はまだ無い。」"];
const KO = ["안녕하세요, 세계!", "한국어 문장입니다.", "서울특별시 종로구 세종대로 209", "대한민국의 수도는 서울입니다.", "ㄱㄴㄷㄹ ㅏㅑㅓㅕ 한글 자모"];
const AR = ["مرحبا بالعالم!", "اللغة العربية جميلة.", "السلام عليكم ورحمة الله", "٠١٢٣٤٥٦٧٨٩ أرقام عربية", "هذا نص مع تشكيل: مُحَمَّدٌ"];
const OTHER = ["Привет, мир! Как дела?", "Ελληνικά: Καλημέρα κόσμε", "עברית: שלום עולם", "हिन्दी: नमस्ते दुनिया",
  "ไทย: สวัสดีชาวโลก", "Tiếng Việt: Xin chào thế giới", "Türkçe: İstanbul'da ığdır", "Deutsch: Straße, Größe, Äpfel über Öl",
  "Français: à l'école, où êtes-vous? Ça va.", "Español: ¿Qué tal? ¡Muy bien! Año, niño", "Polski: Zażółć gęślą jaźń",
  "ქართული ენა", "Հայերեն", "ᎣᏏᏲ Cherokee", "ᚠᚢᚦᚨᚱᚲ runes", "𝔽𝕣𝕒𝕜𝕥𝕦𝕣 𝒮𝒸𝓇𝒾𝓅𝓉 𝐁𝐨𝐥𝐝", "ﬁ ﬂ ﬀ ligatures", "Ⅰ Ⅱ Ⅲ Ⅳ Ⅻ ⅰ ⅱ"];
const EMOJI = ["😀", "😂", "👍", "👍🏽", "👨‍👩‍👧‍👦", "👩🏻‍💻", "🏳️‍🌈", "🏴‍☠️", "🇯🇵", "🇺🇸🇬🇧", "❤️", "✈︎", "1️⃣", "#️⃣",
  "🧑‍🤝‍🧑", "👁️‍🗨️", "🤖", "🚀", "🔥", "✅", "❌", "⭐", "☕", "🎉🎊", "🙏", "💯", "🤷‍♂️", "🧔🏾‍♀️", "😶‍🌫️", "❤️‍🔥"];
const CODE = [
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;\n\treturn 0;\n}\n",
  "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);\n",
  "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
  "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n",
  "SELECT id, name FROM users WHERE age >= 18 AND country = 'DE' ORDER BY name DESC LIMIT 10;",
  "<!DOCTYPE html>\n<html lang=\"en\">\n  <body class=\"main\"><p>Hi &amp; bye</p></body>\n</html>\n",
  "{\"model\": \"deepseek-v4\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": 0.7}",
  "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | tr a-z A-Z; done 2>&1 | tee log\n",
  "public static void main(String[] args) { System.out.println(\"x=\" + x++); }",
  "x := map[string]int{\"a\": 1}\nif v, ok := x[\"a\"]; ok && v != 0 { return }",
  "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
  "a_b_c __init__ __name__ == '__main__' self.__dict__['_x'] obj?.prop ?? null !== undefined",
  "CRLF line one\r\nline two\r\n\r\nline four\r\n", "mixed\rcarriage\rreturns\n\r\n\r",
];
const SPECIAL = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>", "<|EOT|>",
  "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>", "<｜action｜>", "<｜query｜>", "<｜title｜>", "<｜read_url｜>",
  "<｜image｜>", "<｜place▁holder▁no▁0｜>", "<｜place▁holder▁no▁799｜>", "<｜fim▁hole｜>", "<｜tool▁calls▁begin｜>", "<dsml:", "</dsml:"];
const NEAR_SPECIAL = ["<｜User", "｜User｜>", "<|User|>", "<｜user｜>", "< think>", "<think", "think>", "<｜DSML", "DSML｜",
  "｜DSML", "<｜/table>｜DSML｜", "<｜place▁holder▁no▁800｜>", "<dsml", "<｜", "｜>", "▁", "｜｜", "<｜begin▁of▁sentence"];
const ODD = ["\ufffd", "\ufeffBOM at start", "zero\u200bwidth\u200cnon\u200djoiner", "\u00ad soft hyphen", "RTL \u202eevil\u202c text",
  "\u2066isolate\u2069", "e\u0301\u0302\u0303 stacked marks", "\u0301 leading mark", "\ue000\uf8ff private use", "\u{f0000}\u{10fffd} plane 15/16",
  "\ufdd0\ufffe\uffff nonchars", "\u{1d11e} music", "a\u0000b\u0001c\u001f\u007fd", "Ã©Ã¨ mojibake Ã¼", "ĠÑĤÐ²ÑĬÑĢ byte-level look",
  "\\xC0\\x80 \\uD800 escaped-looking", "%C3%A9 percent-encoded", "&#x1F600; &eacute;", "\u00a0\u2007\u202f\u3000 odd spaces",
  "\u2028line\u2029para\u0085nel", "\u180e mongolian vowel separator", "\u1680ogham", "\u2060word joiner\ufe0fvs16\ufe0e", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３",
  "\u{e0041}\u{e0042} tags", "\u{1f3fb}\u{1f3ff} lone modifiers", "\u{1f1e6}\u{1f1e7}\u{1f1e8} regional", "x\u{20dd} enclosing"];
const WS = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2003", " \t ", "\n\n", "\t\t\t", "    "];
const NUMS = () => pick([
  () => String(int(1e9)), () => "0".repeat(1 + int(30)), () => repeat(1 + int(40), () => String(int(10))).join(""),
  () => `${int(1e6)}.${int(1e6)}`, () => `${int(999)},${String(int(1000)).padStart(3, "0")},${String(int(1000)).padStart(3, "0")}`,
  () => `-${int(100)}e${int(30)}`, () => `0x${int(2 ** 31).toString(16)}`, () => "１２３４５６", () => "٣٤٥٦", () => "²³¹ ½ ¾ ⅓",
  () => `${int(3000)}-${String(1 + int(12)).padStart(2, "0")}-${String(1 + int(28)).padStart(2, "0")}T12:34:56Z`,
]) ();

const lines = [];
const add = s => lines.push(s);

// Fixed pieces, each on its own.
for (const a of [EN, ZH, JA, KO, AR, OTHER, EMOJI, CODE, SPECIAL, NEAR_SPECIAL, ODD, WS]) for (const s of a) add(s);
// Whitespace and digit extremes.
for (const n of [1, 2, 3, 4, 5, 7, 16, 63, 64, 65, 200, 1000]) { add(" ".repeat(n)); add("\t".repeat(n) + "x"); add("\n".repeat(n)); add("1".repeat(n)); }
for (const n of [2, 3, 10, 100]) { add("\r\n".repeat(n)); add(" \n".repeat(n) + "end"); add("a" + " ".repeat(n) + "b"); add("x" + "\u3000".repeat(n)); }
add("9".repeat(5000)); add("ab".repeat(3000)); add("😀".repeat(300)); add("你".repeat(1000)); add(".".repeat(500)); add("-=".repeat(400));

// Generated mixtures.
const sentence = () => {
  const w = repeat(3 + int(15), () => pick(EN_WORDS));
  w[0] = w[0][0].toUpperCase() + w[0].slice(1);
  return w.join(pick([" ", " ", " ", ", ", "  "])) + pick([".", "!", "?", "...", ":", ";", ""]);
};
const CHUNKS = [sentence, sentence, sentence, () => pick(EN), () => pick(ZH), () => pick(JA), () => pick(KO), () => pick(AR),
  () => pick(OTHER), () => pick(EMOJI), () => pick(CODE), () => pick(SPECIAL), () => pick(NEAR_SPECIAL), () => pick(ODD),
  () => pick(WS), NUMS];
for (let i = 0; i < 1000; i++) {
  const n = 1 + int(6);
  let s = "";
  for (let k = 0; k < n; k++) s += pick(CHUNKS)() + (rand() < 0.5 ? pick(WS) : "");
  add(s);
}
// Random code points (categories P, S, M, N, Z, C, letters, CJK, emoji) in short strings.
const RANGES = [[0x20, 0x7e], [0xa0, 0x17f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x6ff], [0x900, 0x97f],
  [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x2070, 0x209f], [0x20a0, 0x20cf], [0x2100, 0x214f], [0x2190, 0x22ff],
  [0x2460, 0x24ff], [0x2500, 0x257f], [0x3000, 0x303f], [0x3040, 0x30ff], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff00, 0xffef],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f680, 0x1f6ff], [0x1f900, 0x1f9ff]];
const SPICE = [..." \t\n\r.,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+`~0123456789", "\r\n", "\u00a0", "\u3000", "\u200d", "\ufe0f", "\u0301"];
for (let i = 0; i < 900; i++) {
  let s = "";
  const n = 1 + int(40);
  for (let k = 0; k < n; k++) {
    if (rand() < 0.3) s += pick(SPICE);
    else if (rand() < 0.4) s += pick(EN_WORDS);
    else { const [lo, hi] = pick(RANGES); s += String.fromCodePoint(lo + int(hi - lo + 1)); }
  }
  add(s);
}
// Special tokens glued to text and to each other.
for (let i = 0; i < 200; i++) {
  const parts = repeat(2 + int(5), () => pick([() => pick(SPECIAL), () => pick(NEAR_SPECIAL), sentence, () => pick(ZH), () => pick(WS), NUMS])());
  add(parts.join(rand() < 0.5 ? "" : pick(WS)));
}

fs.writeFileSync(OUT, lines.map(s => JSON.stringify(s)).join("\n") + "\n");
console.log(`wrote ${lines.length} strings to ${OUT}`);
