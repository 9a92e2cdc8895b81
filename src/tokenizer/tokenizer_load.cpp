// Loading hs::Tokenizer from tokenizer.json / GGUF, and writing it back as GGUF metadata.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "format/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/chat_tokens.h"
#include "util/error.h"
#include "util/mmap.h"

namespace hs {
namespace {

using nlohmann::json;

constexpr const char* kGgufPreName = "joyai-llm";
// llama.cpp names that mean DeepSeek-V3/V4's three regexes (tokenizer.md §5).
constexpr std::array<std::string_view, 3> kDeepseekPreNames = {"joyai-llm", "deepseek-v3", "hunyuan-dense"};

// llama.cpp's converter: added tokens flagged special, or shaped <｜…｜> / <|…|>, are control.
bool looks_like_control(std::string_view s) {
  const auto wrapped = [&](std::string_view open, std::string_view close) {
    return s.size() >= open.size() + close.size() && s.starts_with(open) && s.ends_with(close);
  };
  return wrapped("<｜", "｜>") || wrapped("<|", "|>");
}

// tokenizer_config.json writes a token either as a string or as {"content": ...}.
std::string config_token(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  fail("tokenizer_config.json: ", key, " is neither a string nor {\"content\": ...}");
}

// The pre-tokenizer must be Split(Regex, Isolated)... then ByteLevel without its own regex.
std::vector<std::string> parse_pretokenizer(const json& pt, const std::string& origin) {
  HS_CHECK(pt.is_object(), origin, ": pre_tokenizer missing (a byte-level BPE needs one)");
  std::vector<json> stages;
  if (pt.value("type", "") == "Sequence") stages = pt.at("pretokenizers").get<std::vector<json>>();
  else stages.push_back(pt);
  HS_CHECK(!stages.empty() && stages.back().value("type", "") == "ByteLevel", origin,
           ": pre_tokenizer must end with ByteLevel");
  const json& bl = stages.back();
  HS_CHECK(!bl.value("add_prefix_space", false) && !bl.value("use_regex", true), origin,
           ": unsupported ByteLevel pre-tokenizer options (need add_prefix_space=false, use_regex=false)");
  std::vector<std::string> patterns;
  for (size_t i = 0; i + 1 < stages.size(); ++i) {
    const json& s = stages[i];
    HS_CHECK(s.value("type", "") == "Split" && s.contains("pattern") && s["pattern"].contains("Regex") &&
                 s.value("behavior", "") == "Isolated" && !s.value("invert", false),
             origin, ": unsupported pre-tokenizer stage ", i, " (only Split by Regex, Isolated): ", s.dump());
    patterns.push_back(s["pattern"]["Regex"].get<std::string>());
  }
  return patterns;
}

void check_model(const json& j, const std::string& origin) {
  const json& m = j.at("model");
  HS_CHECK(m.value("type", "BPE") == "BPE", origin, ": model type ", m.value("type", ""), " is not BPE");
  const auto empty_or_null = [&](const char* k) { return !m.contains(k) || m[k].is_null() || m[k] == ""; };
  HS_CHECK(empty_or_null("continuing_subword_prefix") && empty_or_null("end_of_word_suffix") &&
               !m.value("byte_fallback", false) && !(m.contains("ignore_merges") && m["ignore_merges"] == true) &&
               (!m.contains("dropout") || m["dropout"].is_null()),
           origin, ": unsupported BPE options (subword prefix/suffix, byte_fallback, ignore_merges or dropout)");
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& n = j["normalizer"];
    HS_CHECK(n.value("type", "") == "Sequence" && n.value("normalizers", json::array()).empty(), origin,
             ": unsupported normalizer ", n.dump());
  }
  if (j.contains("decoder") && !j["decoder"].is_null())
    HS_CHECK(j["decoder"].value("type", "") == "ByteLevel", origin, ": unsupported decoder ", j["decoder"].dump());
}

std::pair<std::string, std::string> split_merge(const std::string& s, size_t rank, const std::string& origin) {
  const size_t sp = s.find(' ');
  HS_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
           origin, ": merge ", rank, " is not \"A B\": \"", s, "\"");
  return {s.substr(0, sp), s.substr(sp + 1)};
}

// A special token id key: absent (or a signed -1) is -1; anything else must be an id of the
// vocabulary, checked before the cast (the message names the file, the key and the value).
int32_t gguf_token_id(const gguf::File& f, const std::string& key, size_t n_tokens) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) return -1;
  if (const auto* u = std::get_if<uint64_t>(&v->v)) {
    HS_CHECK(*u < n_tokens, f.path(), ": ", key, " = ", *u, ": not a token id (the vocabulary has ", n_tokens, " tokens)");
    return static_cast<int32_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v->v)) {
    if (*i == -1) return -1;
    HS_CHECK(*i >= 0 && static_cast<uint64_t>(*i) < n_tokens, f.path(), ": ", key, " = ", *i,
             ": not a token id (the vocabulary has ", n_tokens, " tokens)");
    return static_cast<int32_t>(*i);
  }
  fail(f.path(), ": ", key, " is not an integer");
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  HS_CHECK(file_exists(path) || is_directory(path), "tokenizer: no such file or directory: ", path);
  if (is_directory(path)) {
    const std::string json_path = path + "/tokenizer.json";
    HS_CHECK(file_exists(json_path), "tokenizer: directory ", path, " has no tokenizer.json");
    return from_hf_file(json_path);
  }
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return from_gguf(gguf::File(path));
  return from_hf_file(path);
}

Tokenizer Tokenizer::from_hf_file(const std::string& json_path) {
  const size_t slash = json_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : json_path.substr(0, slash);
  const std::string cfg_path = dir + "/tokenizer_config.json";
  const std::string cfg = file_exists(cfg_path) ? read_file(cfg_path) : std::string();
  return from_hf_json(read_file(json_path), cfg, json_path);
}

Tokenizer Tokenizer::from_hf_json(std::string_view tokenizer_json, std::string_view config_json,
                                  const std::string& origin) {
  try {
    const json j = json::parse(tokenizer_json);
    check_model(j, origin);
    Tokenizer t(parse_pretokenizer(j.value("pre_tokenizer", json()), origin));
    const json& vocab = j.at("model").at("vocab");
    HS_CHECK(vocab.is_object(), origin, ": model.vocab is not an object");
    std::vector<std::pair<int64_t, const std::string*>> base;  // one walk of the (ordered) map
    base.reserve(vocab.size());
    int64_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      base.emplace_back(it.value().get<int64_t>(), &it.key());
      max_id = std::max(max_id, base.back().first);
    }
    const json added = j.value("added_tokens", json::array());
    for (const auto& a : added) max_id = std::max<int64_t>(max_id, a.at("id").get<int64_t>());
    HS_CHECK(max_id >= 0 && max_id < (int64_t{1} << 30), origin, ": bad vocabulary size ", max_id + 1);
    t.tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
    t.types_.assign(t.tokens_.size(), TokenType::Unused);  // ids nobody names stay unused
    t.normalized_.assign(t.tokens_.size(), 0);
    for (const auto& [i, tok] : base) {
      HS_CHECK(i >= 0, origin, ": negative id for token ", *tok);
      t.tokens_[static_cast<size_t>(i)] = *tok;
      t.types_[static_cast<size_t>(i)] = TokenType::Normal;
    }
    for (const auto& a : added) {
      const int64_t i = a.at("id").get<int64_t>();
      HS_CHECK(i >= 0, origin, ": negative added-token id");
      const std::string content = a.at("content").get<std::string>();
      const bool special = a.value("special", false);
      HS_CHECK(!a.value("lstrip", false) && !a.value("rstrip", false) && !a.value("single_word", false), origin,
               ": added token ", content, ": lstrip/rstrip/single_word are not supported");
      t.tokens_[static_cast<size_t>(i)] = content;
      t.types_[static_cast<size_t>(i)] = special || looks_like_control(content) ? TokenType::Control : TokenType::UserDefined;
      t.normalized_[static_cast<size_t>(i)] = a.value("normalized", !special) ? 1 : 0;
    }
    std::vector<std::pair<std::string, std::string>> merges;
    const json& model = j.at("model");
    if (auto jm = model.find("merges"); jm != model.end()) {  // an iterator: no copy of 127k strings
      HS_CHECK(jm->is_array(), origin, ": model.merges is not an array");
      merges.reserve(jm->size());
      for (size_t r = 0; r < jm->size(); ++r) {
        const json& m = (*jm)[r];
        if (m.is_string()) merges.push_back(split_merge(m.get<std::string>(), r, origin));
        else if (m.is_array() && m.size() == 2) merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        else fail(origin, ": merge ", r, " is neither \"A B\" nor [\"A\", \"B\"]");
      }
    }
    if (!config_json.empty()) {
      const json cfg = json::parse(config_json);
      t.bos_name_ = config_token(cfg, "bos_token");
      t.eos_name_ = config_token(cfg, "eos_token");
      t.pad_name_ = config_token(cfg, "pad_token");
    }
    t.finalize(merges, origin);
    return t;
  } catch (const json::exception& e) {
    fail(origin, ": malformed tokenizer JSON: ", e.what());
  }
}

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
  const std::string origin = f.path();
  const std::string model = f.get_string("tokenizer.ggml.model");
  HS_CHECK(model == "gpt2", origin, ": tokenizer.ggml.model is \"", model, "\"; only \"gpt2\" (byte-level BPE) is supported");
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : std::string("(missing)");
  HS_CHECK(std::find(kDeepseekPreNames.begin(), kDeepseekPreNames.end(), pre) != kDeepseekPreNames.end(), origin,
           ": tokenizer.ggml.pre \"", pre, "\" is not a DeepSeek pre-tokenizer (joyai-llm, deepseek-v3)");
  Tokenizer t(deepseek_pretokenizer_patterns());
  t.tokens_ = f.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
  HS_CHECK(types.size() == t.tokens_.size(), origin, ": tokenizer.ggml.token_type has ", types.size(),
           " entries, tokenizer.ggml.tokens ", t.tokens_.size());
  HS_CHECK(!t.tokens_.empty() && t.tokens_.size() < (size_t{1} << 30), origin, ": bad token count ", t.tokens_.size());
  t.types_.resize(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    HS_CHECK(types[i] >= 1 && types[i] <= 6, origin, ": token ", i, " has unknown token_type ", types[i]);
    t.types_[i] = static_cast<TokenType>(types[i]);
  }
  t.normalized_.assign(t.tokens_.size(), 0);  // GGUF keeps no such flag: one matching pass
  const std::vector<std::string> ms = f.get_string_array("tokenizer.ggml.merges");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(ms.size());
  for (size_t r = 0; r < ms.size(); ++r) merges.push_back(split_merge(ms[r], r, origin));
  t.special_.bos = gguf_token_id(f, "tokenizer.ggml.bos_token_id", t.tokens_.size());
  t.special_.eos = gguf_token_id(f, "tokenizer.ggml.eos_token_id", t.tokens_.size());
  t.special_.pad = gguf_token_id(f, "tokenizer.ggml.padding_token_id", t.tokens_.size());
  t.finalize(merges, origin);
  return t;
}

void Tokenizer::finalize(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& origin) {
  const size_t n = tokens_.size();
  vocab_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (types_[i] == TokenType::Normal) vocab_.try_emplace(tokens_[i], id);
    else if (is_added(id)) added_ids_.try_emplace(tokens_[i], id);
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append_codepoint(bytelevel::byte_to_codepoint(static_cast<uint8_t>(b)), s);
    auto it = vocab_.find(s);
    HS_CHECK(it != vocab_.end(), origin, ": the vocabulary lacks the byte-level token of byte ", b);
    byte_ids_[static_cast<size_t>(b)] = it->second;
  }
  merges_.reserve(merges.size());
  merge_map_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    HS_CHECK(ia != vocab_.end() && ib != vocab_.end() && im != vocab_.end(), origin, ": merge ", r, " (\"", a, " ", b,
             "\") names a token that is not in the vocabulary");
    merges_.emplace_back(ia->second, ib->second);
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
    merge_map_[key] = MergeInfo{static_cast<int32_t>(r), im->second};  // a repeated pair: the later rank wins, as in HF
  }
  bytes_off_.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    if (types_[i] == TokenType::Normal) {
      if (!bytelevel::decode(tokens_[i], bytes_blob_)) bytes_blob_ += tokens_[i];  // not byte-level: as HF, raw
    } else if (is_added(static_cast<int32_t>(i))) {
      bytes_blob_ += tokens_[i];
      (normalized_[i] ? added_second_ : added_first_).add(tokens_[i], static_cast<int32_t>(i));
    }
    HS_CHECK(bytes_blob_.size() < UINT32_MAX, origin, ": vocabulary text over 4 GiB");
    bytes_off_[i + 1] = static_cast<uint32_t>(bytes_blob_.size());
    max_token_bytes_ = std::max<size_t>(max_token_bytes_, bytes_off_[i + 1] - bytes_off_[i]);
  }
  const auto by_name = [&](const std::string& name, std::string_view dflt) {
    const std::string s = name.empty() ? std::string(dflt) : name;
    const int32_t id = token_to_id(s);
    HS_CHECK(id >= 0 || name.empty(), origin, ": tokenizer_config.json names token \"", name, "\", which is not in the vocabulary");
    return id;
  };
  if (special_.bos < 0) special_.bos = by_name(bos_name_, ds4::kBos);
  if (special_.eos < 0) special_.eos = by_name(eos_name_, ds4::kEos);
  if (special_.pad < 0) special_.pad = pad_name_.empty() ? special_.eos : by_name(pad_name_, ds4::kEos);
  special_.user = token_to_id(ds4::kUser);
  special_.assistant = token_to_id(ds4::kAssistant);
  special_.think_begin = token_to_id(ds4::kThinkStart);
  special_.think_end = token_to_id(ds4::kThinkEnd);
  special_.dsml = token_to_id(ds4::kDsml);
}

void Tokenizer::write_gguf_metadata(gguf::Writer& w) const {
  HS_CHECK(pretok_.patterns() == deepseek_pretokenizer_patterns(),
           "write_gguf_metadata: this pre-tokenizer has no GGUF name (only DeepSeek's, \"joyai-llm\")");
  std::vector<std::string> tokens = tokens_;
  std::vector<int32_t> types(types_.size());
  for (size_t i = 0; i < types_.size(); ++i) {
    types[i] = static_cast<int32_t>(types_[i]);
    if (types_[i] == TokenType::Unused && tokens[i].empty()) tokens[i] = cat("[PAD", i, "]");  // llama.cpp's filler
  }
  std::vector<std::string> merges;
  merges.reserve(merges_.size());
  for (const auto& [a, b] : merges_) merges.push_back(cat(tokens_[static_cast<size_t>(a)], " ", tokens_[static_cast<size_t>(b)]));
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", kGgufPreName);
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", merges);
  if (special_.bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(special_.bos));
  if (special_.eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(special_.eos));
  if (special_.pad >= 0) w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(special_.pad));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

}  // namespace hs
