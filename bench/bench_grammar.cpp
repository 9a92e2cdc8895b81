// The cost of structured output per generated token on the DeepSeek-V4 vocabulary (129,280
// ids): for model-like answers (tokenized with the V4 tokenizer), each token's
// TokenConstraint::mask (the mask computed and applied to a logits row) plus accept, with the
// mask cache cold (the first request of a schema) and warm (every later one), and the host
// sampler with and without a mask. Prints one JSON object.
//   ninja -C build bench_grammar && build/bench/bench_grammar [--reps N] [--tokenizer PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "grammar/structured_output.h"
#include "tokenizer/bpe.h"

using namespace hs;
using namespace hs::grammar;

namespace {

using Clock = std::chrono::steady_clock;
double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Case {
  const char* name;
  OutputSpec::Kind kind;
  const char* schema;
  const char* text;  // what a model would write (special tokens as text)
  bool reasoning = false;
  const char* tool = "";
};

const std::string kLong =
    "The committee met on Tuesday to review the quarterly results. Revenue grew by twelve percent, driven mostly by "
    "the new subscription tier, while costs stayed flat thanks to the renegotiated hosting contract. Two risks were "
    "discussed at length: the dependency on a single payment provider, and the hiring freeze in the support team, "
    "which has already pushed the median response time above the target. The chair asked for a mitigation plan for "
    "both by the end of the month, and for a written summary of the customer interviews that marketing ran in the "
    "spring. Everyone agreed to meet again in four weeks.";

std::vector<Case> cases() {
  static const std::string summary = "{\n  \"summary\": \"" + kLong + "\",\n  \"keywords\": [\"revenue\", \"risk\", \"hiring\"]\n}";
  static const std::string bounded = "{\n  \"title\": \"Quarterly review\",\n  \"body\": \"" + kLong.substr(0, 480) + "\"\n}";
  static const std::string think = "The user wants a rating. The text is mostly positive, with two risks; I will rate it "
                                   "four of five.</think>{\"rating\": 4, \"sentiment\": \"positive\", \"confidence\": 0.82}";
  return {
      {"person", OutputSpec::Kind::json_schema,
       R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
          "email":{"type":"string","format":"email"}},"required":["name","age","email"],"additionalProperties":false})",
       "{\n  \"name\": \"Ada Lovelace\",\n  \"age\": 36,\n  \"email\": \"ada.lovelace@example.com\"\n}"},
      {"order_list", OutputSpec::Kind::json_schema,
       R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{
          "sku":{"type":"string"},"qty":{"type":"integer","minimum":1},"price":{"type":"number","minimum":0}},
          "required":["sku","qty","price"],"additionalProperties":false},"minItems":1},"currency":{"enum":["EUR","USD"]}},
          "required":["items","currency"],"additionalProperties":false})",
       "{\n  \"items\": [\n    {\"sku\": \"A-1001\", \"qty\": 2, \"price\": 19.99},\n    {\"sku\": \"B-2040\", \"qty\": 1, "
       "\"price\": 5.5},\n    {\"sku\": \"C-7\", \"qty\": 12, \"price\": 0.25},\n    {\"sku\": \"D-330\", \"qty\": 3, "
       "\"price\": 120}\n  ],\n  \"currency\": \"EUR\"\n}"},
      {"long_text", OutputSpec::Kind::json_schema,
       R"({"type":"object","properties":{"summary":{"type":"string"},"keywords":{"type":"array","items":{"type":"string"}}},
          "required":["summary","keywords"],"additionalProperties":false})",
       summary.c_str()},
      {"bounded_text", OutputSpec::Kind::json_schema,
       R"({"type":"object","properties":{"title":{"type":"string","maxLength":80},"body":{"type":"string","minLength":10,
          "maxLength":500}},"required":["title","body"],"additionalProperties":false})",
       bounded.c_str()},
      {"formats", OutputSpec::Kind::json_schema,
       R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"at":{"type":"string","format":"date-time"},
          "day":{"type":"string","format":"date"},"ok":{"type":"boolean"},"note":{"type":["string","null"]}},
          "required":["id","at","day","ok","note"],"additionalProperties":false})",
       "{\"id\": \"3f2b8c1e-9d4a-4b6e-8a2f-1c0d9e8b7a65\", \"at\": \"2026-11-29T08:15:00Z\", \"day\": \"2026-11-29\", "
       "\"ok\": true, \"note\": null}"},
      {"json_object", OutputSpec::Kind::json_object, "null",
       "{\"answer\": \"Paris\", \"confidence\": 0.97, \"sources\": [{\"title\": \"Atlas\", \"page\": 12}], \"verified\": false}"},
      {"thinking", OutputSpec::Kind::json_schema,
       R"({"type":"object","properties":{"rating":{"type":"integer","minimum":1,"maximum":5},"sentiment":{"enum":
          ["positive","neutral","negative"]},"confidence":{"type":"number","minimum":0,"maximum":1}},
          "required":["rating","sentiment","confidence"],"additionalProperties":false})",
       think.c_str(), true},
      {"tool_call", OutputSpec::Kind::tool_call,
       R"({"type":"object","properties":{"location":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
          "days":{"type":"integer","minimum":1,"maximum":14}},"required":["location","days"]})",
       "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" "
       "string=\"true\">Beijing</｜DSML｜parameter>\n<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n"
       "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
       false, "get_weather"},
  };
}

struct Stats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, total_ms = 0;
};
Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  s.max = v.back();
  s.total_ms = sum / 1000;
  return s;
}
std::string json(const Stats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"mean_us\": %.1f, \"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f, \"total_ms\": %.2f}",
                s.mean, s.p50, s.p90, s.p99, s.max, s.total_ms);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path = HS_TEST_DATA "/tokenizer/v4/tokenizer.json";
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps") reps = std::max(2, std::atoi(argv[i + 1]));
    else if (a == "--tokenizer") tok_path = argv[i + 1];
  }
  const Tokenizer tok = Tokenizer::load(tok_path);
  auto t0 = Clock::now();
  auto vocab = std::make_shared<const Vocabulary>(tok);
  const double vocab_ms = us(Clock::now() - t0) / 1000;
  const auto V = static_cast<int64_t>(vocab->size());
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::vector<float> base(static_cast<size_t>(V)), logits(static_cast<size_t>(V));
  for (auto& x : base) x = noise(rng);

  std::cout << "{\n  \"vocab\": " << V << ", \"trie_nodes\": " << vocab->trie().size() << ", \"vocab_build_ms\": " << vocab_ms
            << ", \"reps\": " << reps << ",\n  \"cases\": [\n";
  std::vector<double> all_cold, all_warm;
  const auto cs = cases();
  for (size_t ci = 0; ci < cs.size(); ++ci) {
    const Case& c = cs[ci];
    OutputSpec spec;
    spec.kind = c.kind;
    spec.schema = ojson::parse(c.schema);
    spec.tool_name = c.tool;
    spec.reasoning_first = c.reasoning;
    const auto out = compile_output(spec, vocab);
    const std::vector<int32_t> ids = tok.encode(c.text);
    std::vector<double> cold, warm, accept_us;
    for (int r = 0; r < reps; ++r) {
      GrammarConstraint g(out);
      for (int32_t id : ids) {
        std::copy(base.begin(), base.end(), logits.begin());
        const auto a = Clock::now();
        g.mask(logits.data(), V);
        const auto b = Clock::now();
        if (logits[static_cast<size_t>(id)] == -std::numeric_limits<float>::infinity()) {
          std::cerr << "bench_grammar: case " << c.name << ": token '" << vocab->bytes(id) << "' masked\n";
          return 1;
        }
        g.accept(id);
        const auto d = Clock::now();
        (r == 0 ? cold : warm).push_back(us(d - a));
        if (r > 0) accept_us.push_back(us(d - b));
      }
      if (!g.finished()) {
        std::cerr << "bench_grammar: case " << c.name << ": the output is not complete\n";
        return 1;
      }
    }
    all_cold.insert(all_cold.end(), cold.begin(), cold.end());
    all_warm.insert(all_warm.end(), warm.begin(), warm.end());
    const MaskStats ms = out->cache->stats();
    std::cout << "    {\"name\": \"" << c.name << "\", \"tokens\": " << ids.size() << ", \"grammar_nodes\": " << out->grammar->nodes.size()
              << ", \"compile_ms\": " << out->compile_seconds * 1000 << ", \"mask_entries\": " << ms.entries
              << ", \"entry_build_ms\": " << ms.build_seconds * 1000 << ",\n     \"cold\": " << json(stats(cold))
              << ",\n     \"warm\": " << json(stats(warm)) << ", \"accept_mean_us\": " << stats(accept_us).mean << "}"
              << (ci + 1 < cs.size() ? "," : "") << "\n";
  }
  std::cout << "  ],\n  \"all_cold\": " << json(stats(all_cold)) << ",\n  \"all_warm\": " << json(stats(all_warm)) << ",\n";

  // The host sampler (which constrained requests use) on a full row, without and with masks.
  SamplingParams p;
  p.temperature = 1.0f;
  p.logprob = false;  // as the scheduler samples a request that asked for no logprobs
  Sampler sampler(p);
  auto time_sample = [&](const std::vector<float>& row) {
    std::vector<double> t;
    for (int k = 0; k < 20; ++k) {
      const auto a = Clock::now();
      volatile int32_t tok_id = sampler.sample(row.data(), V).token;
      (void)tok_id;
      t.push_back(us(Clock::now() - a));
    }
    return stats(t);
  };
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::json_schema;
  spec.schema = ojson::parse(R"({"type":"object","properties":{"s":{"type":"string"}},"required":["s"]})");
  GrammarConstraint open(compile_output(spec, vocab));
  std::vector<float> structural = base, inside = base;
  open.mask(structural.data(), V);  // before '{': a handful of tokens
  for (int32_t id : tok.encode("{\"s\": \"abc")) open.accept(id);
  open.mask(inside.data(), V);  // inside a string: nearly the whole vocabulary
  std::cout << "  \"host_sample_unmasked\": " << json(time_sample(base)) << ",\n  \"host_sample_mask_structural\": "
            << json(time_sample(structural)) << ",\n  \"host_sample_mask_in_string\": " << json(time_sample(inside)) << "\n}\n";
  return 0;
}
