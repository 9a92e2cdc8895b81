// Shared by the libFuzzer targets of tests/fuzz (docs/fuzzing.md). A target must never crash,
// leak, hit undefined behaviour or throw anything but the project's error types on any input:
// each catches exactly those types, so any other exception aborts the run as a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/chat_json.h"
#include "util/error.h"

namespace hs::fuzz {

// The file parsers take paths: the input is written to this process's scratch file (one per
// extension, under $TMPDIR), which is what `path` names after the call.
inline std::string scratch_file(const uint8_t* data, size_t size, const char* ext) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/hs-fuzz-" + std::to_string(::getpid()) + ext;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();  // the harness itself is broken: not a finding about the parser
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The input as a JSON request object (what the API handlers get after parse_body), or null.
inline ojson request_object(const uint8_t* data, size_t size) {
  const std::string_view text = as_text(data, size);
  ojson req = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  return req.is_object() ? req : ojson();
}

// An invariant of the code under test failed: report it as a crash (libFuzzer saves the input).
[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "invariant broken: %s\n", what.c_str());
  std::abort();
}

// The invariants of a converted API request (fuzz_anthropic, fuzz_responses): the prompt it
// renders to is inside (0, ctx), and a refused request is a 400 or a 404.
inline void check_prompt_size(size_t ids, int64_t ctx) {
  if (ids == 0 || static_cast<int64_t>(ids) >= ctx) broken("a prompt outside (0, ctx) passed the context bound");
}
inline void check_refusal_status(int status) {
  if (status != 400 && status != 404) broken("a request error with status " + std::to_string(status));
}

}  // namespace hs::fuzz
