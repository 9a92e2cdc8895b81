// Builds the seed corpora of the fuzz targets: hs_fuzz_seeds OUT writes OUT/<target>/ (target =
// the fuzz_*.cpp name without "fuzz_") from tests/data and from the project's own writers, so
// no binary seed is committed. Seeds are kept small (a few KB): libFuzzer mutates them fastest.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/npy.h"
#include "model/synthetic.h"
#include "tokenizer/chat_json.h"
#include "tokenizer/dsml.h"
#include "util/error.h"
#include "util/mmap.h"

using namespace hs;

namespace {

const std::string kData = HS_TEST_DATA;

class Corpus {
 public:
  Corpus(const std::string& root, const std::string& name) : dir_(root + "/" + name) {
    ::mkdir(root.c_str(), 0755);
    ::mkdir(dir_.c_str(), 0755);
  }
  const std::string& dir() const { return dir_; }
  std::string next_path() { return dir_ + "/seed-" + std::to_string(n_++); }
  void add(const std::string& bytes) {
    std::ofstream f(next_path(), std::ios::binary);
    f << bytes;
    HS_CHECK(f.good(), "cannot write a seed under ", dir_);
  }
  int count() const { return n_; }

 private:
  std::string dir_;
  int n_ = 0;
};

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

void gguf_seeds(Corpus& c) {
  // The built-in model's metadata (DeepSeek-V4 keys and its small tokenizer) with two tensors.
  std::vector<float> embd(4 * 8, 0.5f);
  std::vector<uint8_t> q8(34 * 2, 1);
  {
    gguf::Writer w;
    write_synthetic_metadata(builtin_spec(), w);
    w.add_tensor("token_embd.weight", GgmlType::F32, {8, 4}, embd.data(), embd.size() * 4);
    w.add_tensor("blk.0.attn_q_a.weight", GgmlType::Q8_0, {32, 2}, q8.data(), q8.size());
    const std::string p = c.next_path();
    w.write(p);
  }
  // Every value type, arrays, and a few tensor types, without the model's keys.
  {
    gguf::Writer w;
    w.set_string("general.architecture", "deepseek4");
    w.set_u32("deepseek4.block_count", 2);
    w.set_u64("deepseek4.context_length", 4096);
    w.set_i32("some.i32", -5);
    w.set_f32("deepseek4.rope.freq_base", 10000.0f);
    w.set_bool("deepseek4.expert_weights_norm", true);
    w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
    w.set_i32_array("deepseek4.attention.compress_ratios", {0, 4, 128});
    w.set_f32_array("deepseek4.swiglu_clamp_exp", {10.0f, 10.0f});
    w.set_u32("tokenizer.ggml.eos_token_id", 1);
    w.add_tensor("output_norm.weight", GgmlType::F32, {8}, embd.data(), 32);
    w.add_tensor("x", GgmlType::Q8_0, {32, 2}, q8.data(), q8.size());
    w.write(c.next_path());
  }
}

// A safetensors file: 8-byte little-endian header length, the JSON header, the data.
std::string safetensors(const ojson& header, const std::string& data) {
  const std::string h = header.dump();
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

void safetensors_seeds(Corpus& c) {
  for (const char* dir : {"tiny", "tiny-official", "peaked-tiny", "pro-bf16", "small-bf16"})
    c.add(read_file(kData + "/" + dir + "/config.json"));
  for (const char* f : {"config.json", "config-v4-pro.json"}) c.add(read_file(kData + "/official-config/" + f));
  c.add(safetensors({{"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
                     {"b", {{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {24, 32}}}},
                     {"__metadata__", {{"format", "pt"}}}},
                    std::string(32, '\x01')));
  c.add(safetensors({{"ids", {{"dtype", "I32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                     {"scale", {{"dtype", "F8_E8M0"}, {"shape", {1, 8}}, {"data_offsets", {8, 16}}}},
                     {"w", {{"dtype", "F8_E4M3"}, {"shape", {0, 8}}, {"data_offsets", {16, 16}}}}},
                    std::string(16, '\x02')));
}

void npy_seeds(Corpus& c) {
  const std::vector<float> v(12, 1.5f);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{}, {3}, {2, 6}, {0, 5}, {1, 2, 2, 3}})
    npy::write_f32(c.next_path(), shape, v.data());
}

// The first byte of a tokenizer / DSML seed is the target's knob (limit, options, cut size).
void tokenizer_seeds(Corpus& c) {
  int k = 0;
  for (const std::string& path : {kData + "/tokenizer/v3_text_vectors.jsonl", kData + "/tokenizer/v4_synth_vectors.jsonl"})
    for (const std::string& line : lines_of(path)) {
      const ojson j = parse_json(line, path);
      if (j.is_object() && j.contains("text") && j["text"].is_string() && j["text"].get<std::string>().size() < 2048)
        c.add(std::string(1, static_cast<char>(k++ * 7)) + j["text"].get<std::string>());
    }
  int n = 0;
  for (const std::string& line : lines_of(kData + "/tokenizer/corpus.jsonl")) {
    const ojson j = parse_json(line, "corpus.jsonl");
    if (j.is_string() && j.get<std::string>().size() < 2048 && n++ % 8 == 0)
      c.add(std::string(1, static_cast<char>(k++ * 7)) + j.get<std::string>());
  }
}

void chat_seeds(Corpus& c) {
  for (int i = 1; i <= 4; ++i) c.add(read_file(kData + "/chat/test_input_" + std::to_string(i) + ".json"));
  for (const std::string& line : lines_of(kData + "/chat/supplementary_cases.jsonl")) {
    const ojson j = parse_json(line, "supplementary_cases.jsonl");
    if (!j.contains("messages")) continue;
    ojson req = {{"messages", j["messages"]}};
    for (const char* key : {"tools", "response_format"})
      if (j.contains(key)) req[key] = j[key];
    c.add(req.dump());
  }
}

void anthropic_seeds(Corpus& c) {
  for (const char* s : {
           R"({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello"}]})",
           R"({"max_tokens": 64, "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1;"}, {"type": "text", "text": "Be brief."}],
               "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image", "source": {}}]}]})",
           R"({"max_tokens": 64, "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
               "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 100},
               "messages": [{"role": "user", "content": "Weather in Paris?"},
                 {"role": "assistant", "content": [{"type": "thinking", "thinking": "call it", "signature": "s"}, {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                   {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Rome"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "sunny"}, {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "rain"}], "is_error": true}]}]})",
           R"({"max_tokens": 8, "output_config": {"effort": "max", "format": {"type": "json_schema", "schema": {"type": "object"}}}, "messages": [{"role": "user", "content": "json"}, {"role": "assistant", "content": "{"}]})",
       })
    c.add(s);
}

void responses_seeds(Corpus& c) {
  for (const char* s : {
           R"({"model": "m", "input": "Hello"})",
           R"({"instructions": "Be brief.", "input": [{"role": "developer", "content": "dev"}, {"role": "user", "content": [{"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": "x"}]}]})",
           R"({"input": [{"type": "message", "role": "user", "content": "2+2?"}, {"type": "reasoning", "summary": [{"type": "summary_text", "text": "add"}]},
                 {"type": "function_call", "call_id": "c1", "name": "calc", "arguments": "{\"e\": \"2+2\"}"}, {"type": "function_call_output", "call_id": "c1", "output": "4"}],
               "tools": [{"type": "function", "name": "calc", "parameters": {"type": "object", "properties": {"e": {"type": "string"}}}}, {"type": "web_search"}],
               "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "calc"}]}, "reasoning": {"effort": "high"}})",
           R"({"input": "json", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}, "max_output_tokens": 16})",
       })
    c.add(s);
}

void dsml_seeds(Corpus& c) {
  const std::string block = render_dsml_block({{"get_weather", {{"city", "Paris"}, {"days", 3}}}, {"run", {{"cmd", "ls -la"}}}});
  const std::string eos = "<｜end▁of▁sentence｜>";
  for (const std::string& s : {"Let me think.</think>It is sunny." + eos, "thinking</think>" + block + eos,
                               std::string("plain answer") + block + eos, "cut" + block.substr(0, block.size() / 2),
                               std::string("no eos at all")})
    for (char knob : {'\x00', '\x03', '\x11', '\x7e'}) c.add(std::string(1, knob) + s);
  for (int i = 1; i <= 4; ++i) c.add(std::string(1, '\x05') + read_file(kData + "/chat/test_output_" + std::to_string(i) + ".txt"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hs_fuzz_seeds OUT_DIR\n");
    return 2;
  }
  try {
    const std::string out = argv[1];
    struct Target {
      const char* name;
      void (*fill)(Corpus&);
    };
    for (const Target& t : {Target{"gguf", gguf_seeds}, Target{"safetensors", safetensors_seeds}, Target{"npy", npy_seeds},
                            Target{"tokenizer", tokenizer_seeds}, Target{"chat", chat_seeds},
                            Target{"anthropic", anthropic_seeds}, Target{"responses", responses_seeds},
                            Target{"dsml", dsml_seeds}}) {
      Corpus c(out, t.name);
      t.fill(c);
      std::printf("%s: %d seeds\n", c.dir().c_str(), c.count());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "hs_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
