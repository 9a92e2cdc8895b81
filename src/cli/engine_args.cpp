#include "cli/engine_args.h"

#include "util/error.h"

namespace hs::cli {

std::vector<OptionSpec> engine_option_specs(const std::string& device_help, const std::string& numerics_help) {
  return {
      {"device", true, device_help, "DEV"},
      {"devices", true, "one device per shard, e.g. cpu,cpu or cuda:0,cuda:1 (layer split; overrides --device)",
       "D0,D1,..."},
      {"layer-split", true, "layers per shard, e.g. 22,21 (default: an even split over --devices)", "N,N,..."},
      {"numerics", true, numerics_help, "MODE"},
      {"threads", true, "CPU threads of the engine (default: all cores)", "N"},
  };
}

EngineOptions engine_options(const ParsedArgs& a, const std::string& default_device,
                             const std::string& default_numerics) {
  EngineOptions o;
  o.device = a.get_or("device", default_device);
  if (a.has("devices")) o.devices = split_commas(*a.get("devices"));
  if (a.has("layer-split")) o.layer_split = parse_int_list("--layer-split", *a.get("layer-split"));
  o.threads = static_cast<int>(a.get_int("threads", 0));
  HS_CHECK(o.threads >= 0, "--threads must be at least 0");
  o.numerics = parse_numerics(a.get_or("numerics", default_numerics));
  return o;
}

}  // namespace hs::cli
