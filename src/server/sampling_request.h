// The sampling fields the APIs share: temperature, top_p, top_k, min_p, seed, penalties.
#pragma once
#include "engine/sampler.h"
#include "tokenizer/chat_json.h"

namespace hs::server {

class Service;

// `max_temperature`: 2 for OpenAI, 1 for Anthropic. Without a seed, a random one per request.
// Penalties are OpenAI-only (`penalties` false: not read).
SamplingParams parse_sampling(const ojson& req, Service& svc, double max_temperature, bool penalties);

}  // namespace hs::server
