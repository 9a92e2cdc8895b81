#include "cli/synthetic_args.h"

#include "util/error.h"

namespace hs::cli {

std::vector<OptionSpec> synthetic_option_specs() {
  return {
      {"synthetic", true, "a synthetic model (random weights of the real shapes) instead of MODEL: tiny, flash or pro "
       "(or builtin: the built-in model of run and serve)", "PRESET"},
      {"layers", true, "synthetic: number of layers (default: the preset's)", "N"},
      {"quant", true, "synthetic: f32, q8, mxfp4, q2, q4k or native (default mxfp4)", "MIX"},
  };
}

std::optional<SyntheticSpec> synthetic_spec_from(const ParsedArgs& a, const EngineOptions& engine) {
  if (!a.has("synthetic")) {
    HS_CHECK(!a.has("layers") && !a.has("quant"), "--layers and --quant need --synthetic PRESET");
    return std::nullopt;
  }
  bool on_device = engine.device.rfind("cuda:", 0) == 0;
  for (const auto& d : engine.devices) on_device |= d.rfind("cuda:", 0) == 0;
  SyntheticSpec s;
  s.preset = *a.get("synthetic");
  if (s.preset == "builtin") {  // the built-in model of run/serve (the tiny preset, its seed, f32)
    s = builtin_spec();
    s.layers = static_cast<int>(a.get_int("layers", s.layers));
    s.quant = a.get_or("quant", s.quant);
    if (engine.draft == "mtp" || engine.draft == "dspark") s.draft = engine.draft;
    synthetic_config(s);
    return s;
  }
  s.layers = static_cast<int>(a.get_int("layers", -1));
  s.quant = a.get_or("quant", "mxfp4");
  s.device_fill = on_device && s.preset != "tiny";
  // A synthetic model has the drafter it is asked to draft with.
  if (engine.draft == "mtp" || engine.draft == "dspark") s.draft = engine.draft;
  synthetic_config(s);  // a bad preset, layer count or quant fails here, before anything loads
  return s;
}

}  // namespace hs::cli
