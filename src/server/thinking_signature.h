// The `signature` of the thinking blocks /v1/messages answers with. Claude Code keeps a
// thinking block across turns only when it has one, and with `thinking.display: "omitted"`
// the block's text is empty: so the signature carries the reasoning itself (base64, with a
// checksum), and a block sent back with empty text gets its reasoning from it.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace hs::server {

// "hs1" + 8 hex digits (FNV-1a of the text) + "." + base64 of the text. Never empty.
std::string thinking_signature(std::string_view reasoning);
// The reasoning of a signature made by thinking_signature(); nullopt for any other string
// (another server's signature, a damaged one).
std::optional<std::string> reasoning_from_signature(std::string_view signature);

}  // namespace hs::server
