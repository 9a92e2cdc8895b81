#include "cli/engine_args.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace hs::cli {

std::vector<OptionSpec> engine_option_specs(const std::string& device_help, const std::string& numerics_help) {
  return {
      {"device", true, device_help, "DEV"},
      {"devices", true, "one device per shard, e.g. cpu,cpu or cuda:0,cuda:1 (layer split; overrides --device)",
       "D0,D1,..."},
      {"layer-split", true, "layers per shard (22,21) or relative shares (2,1) (default: the devices' free memory)",
       "N,N,..."},
      {"numerics", true, numerics_help, "MODE"},
      {"threads", true, "CPU threads of the engine (default: all cores)", "N"},
      {"expert-top-k", true, "route each token to N experts instead of the model's k (approximate: faster, "
       "lower quality; default: the model's)", "N"},
      {"micro-batches", true, "cut each batched step into N micro-batches that flow through the shards as a "
       "pipeline, so shards on different devices work at the same time (default: the number of shards when "
       "they are on two or more devices, else 1)", "N"},
      {"peer-access", true, "how the HC state moves between two GPUs: auto (device to device, direct where peer "
       "access is possible), on (direct or refuse), off (through host memory) (default auto)", "MODE"},
      {"cuda-graphs", true, "replay each decode step of a CUDA shard as one captured graph: on or off (default "
       "on; off launches the same kernels one by one)", "on|off"},
      {"moe-ksplit", true, "tuning of the CUDA decode MoE of the q2 mix (IQ2_XXS/Q2_K experts): K-splits per "
       "block of its gate/up and down kernels, each 1, 2, 4 or 8 (default 0,0: the measured rule)", "GU,DOWN"},
      {"pdl", true, "programmatic dependent launch on CUDA shards: each kernel launches while the one before it "
       "runs and waits for it on the GPU, hiding launch gaps: on or off (default on)", "on|off"},
      {"fused-handover", true, "on CUDA shards, run each hand-over between sub-layers (hc_post, the next hc_pre "
       "and its norm) as one launch, with the same results: on or off (default off: not yet measured faster)",
       "on|off"},
      {"state-memory", true, "GiB for each shard's state pool (every sequence's KV rows and compressed entries, "
       "in pages; default: what the weights leave on a GPU less 4 GiB and a tenth of it, a quarter of RAM on the "
       "CPU, at most what --max-seqs sequences of the full context take)", "GIB"},
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
  o.expert_top_k = static_cast<int>(a.get_int("expert-top-k", 0));
  HS_CHECK(o.expert_top_k >= 0, "--expert-top-k must be positive, got ", o.expert_top_k);
  o.pipeline_micro_batches = static_cast<int>(std::clamp<long long>(a.get_int("micro-batches", 0), -1, 1 << 20));
  HS_CHECK(o.pipeline_micro_batches >= 1 || !a.has("micro-batches"), "--micro-batches must be at least 1, got ",
           o.pipeline_micro_batches);
  o.peer_access = a.get_or("peer-access", "auto");  // (checked by the engine, before any load)
  o.cuda_graphs = a.get_on_off("cuda-graphs", o.cuda_graphs);
  o.pdl = a.get_on_off("pdl", o.pdl);
  o.fused_handover = a.get_on_off("fused-handover", o.fused_handover);
  if (a.has("moe-ksplit")) {
    const std::vector<int> ks = parse_int_list("--moe-ksplit", *a.get("moe-ksplit"));
    HS_CHECK(ks.size() == 2, "--moe-ksplit: expected two K-splits GU,DOWN, got ", ks.size(), " values");
    for (size_t i = 0; i < 2; ++i) {
      HS_CHECK(ks[i] == 0 || ks[i] == 1 || ks[i] == 2 || ks[i] == 4 || ks[i] == 8,
               "--moe-ksplit: each K-split must be 0, 1, 2, 4 or 8, got ", ks[i]);
      o.moe_ksplit[i] = ks[i];
    }
  }
  const double gib = a.get_double("state-memory", 0.0);
  HS_CHECK(gib >= 0 && gib <= 1 << 20, "--state-memory must be a positive number of GiB, got ", gib);
  o.state_memory = static_cast<int64_t>(gib * static_cast<double>(int64_t{1} << 30));
  HS_CHECK(gib == 0 || o.state_memory >= (int64_t{1} << 20), "--state-memory ", gib, " GiB is less than 1 MiB");
  return o;
}

std::vector<OptionSpec> draft_option_specs() {
  return {
      {"draft", true, "speculative decoding with the model's own drafter: mtp (its MTP block; an error without one), "
       "dspark (its DSpark drafter, V4-Flash-0731; the same), auto (dspark, else mtp, when the model has one) or off "
       "(default). Lossless: greedy output is plain decode's, sampled output has its distribution", "KIND"},
      {"draft-model", true, "the drafter from a file apart from the model: an MTP-only GGUF (antirez's MTP file, "
       "llama.cpp's); it must be made for this model (implies --draft mtp)", "PATH"},
      {"draft-max", true, "most tokens drafted and verified per step and sequence, 1..16 (default 3; the length adapts "
       "to each request's acceptance, for DSpark to its confidence head, at most its block)", "N"},
      {"draft-confidence", true, "DSpark: verify the drafts up to the first whose confidence is below this, 0..1 "
       "(default 0.5; 0: the whole block)", "C"},
      {"draft-device", true, "where the drafter runs: cpu or cuda:N (default: the last shard's device)", "DEV"},
  };
}

int draft_options(const ParsedArgs& a, EngineOptions& engine) {
  engine.draft = parse_draft_kind(a.get_or("draft", a.has("draft-model") ? "mtp" : "off"));
  engine.draft_model = a.get_or("draft-model", "");
  HS_CHECK(engine.draft_model.empty() || engine.draft != "off", "--draft-model needs --draft mtp, dspark or auto");
  engine.draft_device = a.get_or("draft-device", "");
  if (engine.draft == "off") {
    HS_CHECK(!a.has("draft-device"), "--draft-device needs --draft mtp, dspark or auto");
    HS_CHECK(!a.has("draft-max"), "--draft-max needs --draft mtp, dspark or auto");
    HS_CHECK(!a.has("draft-confidence"), "--draft-confidence needs --draft dspark or auto");
    return 0;
  }
  const long long k = a.get_int("draft-max", 3);
  HS_CHECK(k >= 1 && k <= engine.max_rollback, "--draft-max ", k, ": expected 1..", engine.max_rollback,
           " drafted tokens per step (what the state pools can roll back); --draft off for none");
  return static_cast<int>(k);
}

float draft_confidence(const ParsedArgs& a) {
  const double c = a.get_double("draft-confidence", 0.5);
  HS_CHECK(c >= 0.0 && c <= 1.0, "--draft-confidence ", c, ": expected 0..1 (0: verify the whole block)");
  return static_cast<float>(c);
}

std::vector<OptionSpec> distributed_option_specs() {
  return {
      {"rank", true, "this process's rank in a pipeline of processes (0 owns the tokens and the results)", "R"},
      {"world", true, "number of processes (ranks) in the pipeline, one shard each", "N"},
      {"coordinator", true, "rank 0's address: rank 0 listens on the port, the others connect", "HOST:PORT"},
      {"dist-timeout", true, "seconds to wait for the other ranks at start-up and for a peer in a step (default 600)",
       "S"},
  };
}

namespace {

template <typename Make>
int pipeline_rank(const char* cmd, const EngineOptions& opts, const DistributedOptions& d, Make&& make) {
  try {
    std::unique_ptr<DistributedEngine> made = make();
    DistributedEngine& de = *made;
    std::fprintf(stderr, "%s: rank %d/%d: layers [%d, %d) on %s; pipeline up\n", cmd, d.rank, d.world, de.layer_begin(),
                 de.layer_end(), opts.device.c_str());
    de.serve_forever();
    std::fprintf(stderr, "%s: rank %d: shut down by rank 0\n", cmd, d.rank);
    return 0;
  } catch (const std::exception& e) {
    leave_after_pipeline_failure(cat("hyperstream ", cmd, ": rank ", d.rank, ": error: ", e.what()));
  }
}

}  // namespace

void leave_after_pipeline_failure(const std::string& msg) {
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);
}

int run_pipeline_rank(const char* cmd, const std::string& model, const EngineOptions& opts, const DistributedOptions& d) {
  return pipeline_rank(cmd, opts, d, [&] { return std::make_unique<DistributedEngine>(model, opts, d); });
}

int run_pipeline_rank(const char* cmd, std::unique_ptr<ModelSource> src, const std::string& name,
                      const EngineOptions& opts, const DistributedOptions& d) {
  return pipeline_rank(cmd, opts, d,
                       [&] { return std::make_unique<DistributedEngine>(std::move(src), name, opts, d); });
}

std::optional<DistributedOptions> distributed_options(const ParsedArgs& a, const EngineOptions& eo) {
  const bool any = a.has("rank") || a.has("world") || a.has("coordinator");
  if (!any) {
    HS_CHECK(!a.has("dist-timeout"), "--dist-timeout needs --rank, --world and --coordinator");
    return std::nullopt;
  }
  for (const char* o : {"rank", "world", "coordinator"})
    HS_CHECK(a.has(o), "--", o, " is missing: a pipeline rank needs --rank, --world and --coordinator");
  DistributedOptions d;
  d.rank = static_cast<int>(std::clamp<long long>(a.get_int("rank", -1), -1, 1 << 20));
  d.world = static_cast<int>(std::clamp<long long>(a.get_int("world", 0), 0, 1 << 20));
  d.coordinator = *a.get("coordinator");
  d.timeout_s = a.get_double("dist-timeout", d.timeout_s);
  validate(d, eo);
  return d;
}

}  // namespace hs::cli
