// `bench --cache-turn N[,K]` (cmd_bench.cpp): time to first token of a conversation's next turn,
// cold and with the prefix cache (pools, host memory, disk after a restart), as JSON.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"

namespace hs::cli {

// dir: also through files under it (empty: no disk run).
nlohmann::ordered_json bench_cache_turn(Engine& eng, int64_t n, int64_t k, int64_t chunk, const std::string& dir);

}  // namespace hs::cli
