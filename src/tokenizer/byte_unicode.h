// GPT-2's byte <-> unicode map (byte-level BPE) and the small UTF-8 helpers the tokenizer
// needs. Vocabulary strings are written in the mapped characters (space -> U+0120 'Ġ').
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hs::bytelevel {

// The code point that stands for `byte` in vocabulary strings.
uint32_t byte_to_codepoint(uint8_t byte);
// The byte a mapped code point stands for, or -1 when `cp` is not one of the 256.
int codepoint_to_byte(uint32_t cp);

// Appends the byte-level form of `bytes` (each byte as its mapped character, UTF-8 encoded).
void append_encoded(std::string_view bytes, std::string& out);
// Decodes a byte-level string back to raw bytes. Returns false (out untouched) when a
// character is not in the map, i.e. the string is not byte-level (e.g. an added token).
bool decode(std::string_view text, std::string& out);

}  // namespace hs::bytelevel

namespace hs::utf8 {

void append_codepoint(uint32_t cp, std::string& out);

// Length of the valid UTF-8 sequence starting at s[0] (1-4), or 0 when the bytes there are
// not a valid sequence (bad lead byte, bad continuation, overlong, surrogate, > U+10FFFF).
// A sequence cut short by the end of `s` also gives 0; see incomplete_tail().
size_t valid_sequence_length(std::string_view s);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t valid_prefix_length(std::string_view s);

// When `s` ends with the first 1-3 bytes of a sequence that more bytes could still complete,
// the number of those bytes; otherwise 0.
size_t incomplete_tail(std::string_view s);

// Appends `s`, replacing each maximal invalid subpart with U+FFFD (the WHATWG/Unicode
// "substitution of maximal subparts" practice), so the result is always valid UTF-8.
void append_sanitized(std::string_view s, std::string& out);

}  // namespace hs::utf8
