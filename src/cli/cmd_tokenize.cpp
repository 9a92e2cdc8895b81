// `hyperstream tokenize` and `hyperstream detokenize`: JSON-lines in, JSON-lines out, one
// line per text, so outside tokenizers can be compared with ours line by line.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <optional>

#include "cli/args.h"
#include "cli/commands.h"
#include "format/gguf.h"
#include "tokenizer/bpe.h"
#include "util/error.h"

namespace hs::cli {
namespace {

using nlohmann::json;

// "-" means stdin / stdout.
struct Streams {
  std::ifstream fin;
  std::ofstream fout;
  std::istream* in = &std::cin;
  std::ostream* out = &std::cout;
  std::string in_name, out_name;

  Streams(const std::string& in_path, const std::string& out_path) : in_name(in_path), out_name(out_path) {
    if (in_path != "-") {
      fin.open(in_path, std::ios::binary);
      HS_CHECK(fin.is_open(), "cannot open ", in_path);
      in = &fin;
    }
    if (out_path != "-") {
      fout.open(out_path, std::ios::binary | std::ios::trunc);
      HS_CHECK(fout.is_open(), "cannot create ", out_path);
      out = &fout;
    }
  }
  void finish() {
    out->flush();
    HS_CHECK(out->good(), "write to ", out_name, " failed");
  }
};

// Calls fn(json, line number) for every line of the input; a bad line is an error naming it.
template <typename Fn>
void for_each_json_line(Streams& s, Fn&& fn) {
  std::string line;
  size_t n = 0;
  while (std::getline(*s.in, line)) {
    ++n;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail(s.in_name, " line ", n, ": bad JSON: ", e.what());
    }
    fn(j, n);
  }
  HS_CHECK(s.in->eof(), "read from ", s.in_name, " failed");
}

const std::vector<OptionSpec> kTokenizeOpts = {
    {"in", true, "input: one JSON string per line (- for stdin)", "FILE.jsonl"},
    {"out", true, "output: one JSON array of token ids per line (- for stdout)", "FILE.jsonl"},
    {"plain", false, "do not match added/special tokens in the text (as for untrusted user content)"},
    {"write-gguf", true, "also write the tokenizer as GGUF metadata (a GGUF without tensors)", "OUT.gguf"},
};

const std::vector<OptionSpec> kDetokenizeOpts = {
    {"in", true, "input: one JSON array of token ids per line (- for stdin)", "IDS.jsonl"},
    {"out", true, "output: one JSON string per line (- for stdout); bytes that are not UTF-8 become U+FFFD",
     "TEXT.jsonl"},
};

const char* kTokenizerArg =
    "TOKENIZER is a GGUF file, a tokenizer.json (tokenizer_config.json beside it is read too), or a "
    "model directory holding tokenizer.json. BOS/EOS are never added.";

// The options of `cmd`, or nullopt after printing --help; checks the one TOKENIZER argument.
std::optional<ParsedArgs> parse(const char* cmd, const Args& args, const std::vector<OptionSpec>& opts,
                                const char* synopsis, const char* what) {
  ParsedArgs p(cmd, args, opts);
  if (p.help()) {
    print_help(cmd, synopsis, cat(what, " ", kTokenizerArg), opts);
    return std::nullopt;
  }
  HS_CHECK(p.positionals().size() == 1, "expected one TOKENIZER argument (see hyperstream ", cmd, " --help)");
  return p;
}

}  // namespace

int cmd_tokenize(const Args& args) {
  const auto parsed = parse("tokenize", args, kTokenizeOpts, "TOKENIZER --in FILE.jsonl --out FILE.jsonl",
                            "Encode texts to token ids.");
  if (!parsed) return 0;
  const ParsedArgs& p = *parsed;
  HS_CHECK(p.has("write-gguf") || (p.has("in") && p.has("out")), "--in and --out are required");
  const Tokenizer tok = Tokenizer::load(p.positionals()[0]);
  if (auto path = p.get("write-gguf")) {
    gguf::Writer w;
    tok.write_gguf_metadata(w);
    w.write(*path);
  }
  if (!p.has("in")) return 0;
  HS_CHECK(p.has("out"), "--out is required with --in");
  Streams s(*p.get("in"), *p.get("out"));
  const bool plain = p.has("plain");
  std::string buf;
  std::vector<int32_t> ids;
  for_each_json_line(s, [&](const json& j, size_t n) {
    HS_CHECK(j.is_string(), s.in_name, " line ", n, ": expected a JSON string");
    ids.clear();
    tok.encode_append(j.get_ref<const std::string&>(), ids, !plain);
    buf.clear();
    buf += '[';
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) buf += ',';
      buf += std::to_string(ids[i]);
    }
    buf += "]\n";
    *s.out << buf;
  });
  s.finish();
  return 0;
}

int cmd_detokenize(const Args& args) {
  const auto parsed = parse("detokenize", args, kDetokenizeOpts, "TOKENIZER --in IDS.jsonl --out TEXT.jsonl",
                            "Decode token ids to text.");
  if (!parsed) return 0;
  const ParsedArgs& p = *parsed;
  HS_CHECK(p.has("in") && p.has("out"), "--in and --out are required");
  const Tokenizer tok = Tokenizer::load(p.positionals()[0]);
  Streams s(*p.get("in"), *p.get("out"));
  std::vector<int32_t> ids;
  for_each_json_line(s, [&](const json& j, size_t n) {
    HS_CHECK(j.is_array(), s.in_name, " line ", n, ": expected a JSON array of token ids");
    ids.clear();
    for (const auto& v : j) {
      HS_CHECK(v.is_number_integer(), s.in_name, " line ", n, ": expected integer token ids, got ", v.dump());
      const auto id = v.get<int64_t>();
      HS_CHECK(id >= 0 && id < tok.vocab_size(), s.in_name, " line ", n, ": token id ", id, " is out of range [0, ",
               tok.vocab_size(), ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    *s.out << json(tok.decode(ids)).dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  });
  s.finish();
  return 0;
}

}  // namespace hs::cli
