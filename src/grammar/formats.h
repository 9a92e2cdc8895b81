// String `format`s that structured output enforces, as automata over the string's characters.
// Each accepts a subset of what validators (ajv-formats, full mode) accept, so every generated
// value is valid: date (never February 29), time and date-time (RFC 3339, with a time zone),
// uuid, email, hostname, ipv4, ipv6 (the full eight-group form), uri and url (http/https).
#pragma once
#include <optional>
#include <string_view>

#include "grammar/automaton.h"

namespace hs::grammar {

// The automaton of a known format; nullopt for a format this compiler does not know.
std::optional<Automaton> format_automaton(std::string_view format);

}  // namespace hs::grammar
