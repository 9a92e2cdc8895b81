// JSON in the server: requests are parsed as ordered_json (tool schemas reach the prompt in the
// order the client wrote them); output never throws on invalid UTF-8 (it becomes U+FFFD).
#pragma once
#include <string>
#include <string_view>

#include "tokenizer/chat_json.h"

namespace hs::server {

// Compact JSON; invalid UTF-8 in strings is replaced, never an exception.
std::string dump_json(const ojson& v);
// A request body that must be a JSON object (400 ApiError otherwise: malformed, too deep).
ojson parse_body(std::string_view body);
// Bytes as valid UTF-8 (invalid sequences become U+FFFD).
std::string lossy_utf8(std::string_view bytes);

// Server-Sent Events framing.
std::string sse_data(const ojson& v);                          // "data: {...}\n\n"
std::string sse_event(std::string_view name, const ojson& v);  // "event: name\ndata: {...}\n\n"

}  // namespace hs::server
