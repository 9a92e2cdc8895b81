#include "server/sampling_request.h"

#include "server/service.h"
#include "server/validation.h"

namespace hs::server {

SamplingParams parse_sampling(const ojson& req, Service& svc, double max_temperature, bool penalties) {
  SamplingParams p;
  p.temperature = static_cast<float>(opt_number(req, "temperature", 0, max_temperature).value_or(1.0));
  p.top_p = static_cast<float>(opt_number(req, "top_p", 0, 1).value_or(1.0));
  if (p.top_p <= 0) bad_request("top_p", "'top_p' must be greater than 0");
  const int64_t top_k = opt_int(req, "top_k", -1, INT32_MAX).value_or(0);
  p.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);  // -1 (vLLM) and 0 mean off
  p.min_p = static_cast<float>(opt_number(req, "min_p", 0, 1).value_or(0.0));
  if (penalties) {
    p.presence_penalty = static_cast<float>(opt_number(req, "presence_penalty", -2, 2).value_or(0.0));
    p.frequency_penalty = static_cast<float>(opt_number(req, "frequency_penalty", -2, 2).value_or(0.0));
  }
  const auto seed = opt_int(req, "seed", INT64_MIN, INT64_MAX);
  p.seed = seed ? static_cast<uint64_t>(*seed) : svc.new_seed();
  return p;
}

}  // namespace hs::server
