// The CUDA state ops (kernels/cuda/paged_state.cu through CudaOps) against their CPU twins
// (engine/cpu_state_ops.cpp) on two state pools of one layout, at V4-Flash widths (d 512, rope
// 64, indexer 64 x 128, window 128, ratios 4 and 128, pages of 128), in both row forms, over
// ragged steps: prompts crossing page and window boundaries beside decoders, sequences at
// different positions, padding rows. Per step and layer:
//   kv_store          the stored rows byte for byte (same input, same codes)
//   compressor        every entry and key (decoded) and the slots' raw rows; then the CPU's
//                     pool is copied into the GPU's, so each step starts from the same state
//   indexer_topk      the chosen sets (every visible key is chosen here: exact), and the order
//   attention         the output, from the same pool and the same choice
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "engine/cpu_ops.h"
#include "engine/engine.h"
#include "kernels/cpu/ops.h"
#include "model/config.h"
#include "util/thread_pool.h"

using namespace hs;

#ifdef HS_HAVE_CUDA
namespace {

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Bytes of a backend buffer (host memory for the CPU backend).
std::vector<uint8_t> fetch(Ops& ops, const void* src, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  ops.download(reinterpret_cast<float*>(out.data()), static_cast<const float*>(src), static_cast<int64_t>(bytes / 4));
  return out;
}

struct Side {
  std::unique_ptr<Ops> ops;
  std::unique_ptr<StatePool> pool;
  std::vector<std::unique_ptr<SequenceState>> seqs;
};

// A buffer of n floats on a backend, filled from host values.
float* put(Ops& ops, const std::vector<float>& v) {
  float* p = ops.alloc(static_cast<int64_t>(v.size()));
  ops.upload(p, v.data(), static_cast<int64_t>(v.size()));
  return p;
}

}  // namespace
#endif

namespace {
class StateOps : public testing::TestWithParam<bool> {};  // param: model numerics (packed rows)
}  // namespace

TEST_P(StateOps, CudaMatchesCpuOverRaggedSteps) {
#ifndef HS_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  const bool model = GetParam();
  const Numerics num = model ? Numerics::Model : Numerics::Reference;
  const ModelConfig c = config_from_hf_dir(std::string(HS_TEST_DATA) + "/official-config");
  const int L0 = 0, L1 = 5;  // ratios 0, 0, 4, 128, 4
  ThreadPool tp(4);
  StatePoolOptions po;
  po.slots = 4;
  po.max_context = 2048;
  po.memory_bytes = int64_t{96} << 20;
  po.packed = model;
  Side cpu, gpu;
  cpu.ops = std::make_unique<CpuOps>(tp);
  gpu.ops = make_cuda_ops(0, num);
  for (Side* s : {&cpu, &gpu}) {
    s->pool = std::make_unique<StatePool>(c, L0, L1, *s->ops, po);
    for (int i = 0; i < 3; ++i) s->seqs.push_back(s->pool->acquire());
  }
  const StateLayout& lay = cpu.pool->layout();
  ASSERT_EQ(lay.page, 128);
  const int64_t hd = c.head_dim, H = c.n_heads, ID = c.index_head_dim, IH = c.index_n_heads;
  const int K = c.index_topk;
  const RopeTable rope{c.rope_dim, cpu::rope_inv_freq_yarn(c.rope_dim, c.compress_rope_theta, c.yarn.factor,
                                                           static_cast<double>(c.yarn.original_ctx), c.yarn.beta_fast,
                                                           c.yarn.beta_slow)};
  // Per step: tokens per sequence (0: not in the step), then padding rows.
  struct Plan {
    int64_t n[3];
    int pad;
  };
  std::vector<Plan> plan = {{{200, 7, 0}, 0}, {{1, 130, 3}, 0}, {{1, 1, 1}, 1}, {{1, 1, 140}, 0}};
  for (int i = 0; i < 8; ++i) plan.push_back({{1, 1, 1}, i % 3 == 0 ? 5 : 0});
  plan.push_back({{61, 1, 1}, 0});
  for (int i = 0; i < 6; ++i) plan.push_back({{1, 1, 1}, 0});
  std::vector<CompressorWeights> cw(static_cast<size_t>(L1)), iw(static_cast<size_t>(L1));
  for (int l = L0; l < L1; ++l) {
    const int r = c.ratio(l);
    if (r == 0) continue;
    const int co = c.compress_coff(l);
    cw[l].ape = randv(static_cast<size_t>(r * co * hd), 100 + l, 0.5f);
    cw[l].norm = randv(static_cast<size_t>(hd), 110 + l, 0.3f);
    for (float& x : cw[l].norm) x += 1.0f;
    if (r == c.csa_ratio) {
      iw[l].ape = randv(static_cast<size_t>(r * 2 * ID), 120 + l, 0.5f);
      iw[l].norm = randv(static_cast<size_t>(ID), 130 + l, 0.3f);
      for (float& x : iw[l].norm) x += 1.0f;
    }
  }
  // Weights live as long as the pools (the CUDA backend keeps a device copy per host vector).
  std::vector<std::vector<float>> layer_sinks;
  for (int l = L0; l < L1; ++l) layer_sinks.push_back(randv(static_cast<size_t>(H), 140 + l, 2.0f));
  double worst_attn = 0, worst_entry = 0;
  int64_t code_diffs = 0, codes = 0, set_bad = 0, order_diffs = 0, kv_bad = 0, ring_bad = 0;
  for (size_t st = 0; st < plan.size(); ++st) {
    const Plan& p = plan[st];
    std::vector<int64_t> pos;
    std::vector<int32_t> tok, slot, row0, row_end;
    for (int i = 0; i < 3; ++i) {
      if (!p.n[i]) continue;
      const int32_t first = static_cast<int32_t>(pos.size());
      for (int64_t t = 0; t < p.n[i]; ++t) {
        pos.push_back(cpu.seqs[i]->n_past() + t);
        tok.push_back(0);
        slot.push_back(cpu.seqs[i]->slot());
        row0.push_back(first);
        row_end.push_back(first + static_cast<int32_t>(p.n[i]));
      }
    }
    int64_t max_end = 0;
    for (int64_t q : pos) max_end = std::max(max_end, q + 1);
    bool decode = true;
    for (int i = 0; i < 3; ++i) decode = decode && p.n[i] <= 1;
    for (int k = 0; k < p.pad; ++k) {
      pos.push_back(0);
      tok.push_back(0);
      slot.push_back(-1);
      row0.push_back(static_cast<int32_t>(pos.size() - 1));
      row_end.push_back(static_cast<int32_t>(pos.size()));
    }
    const int64_t n = static_cast<int64_t>(pos.size());
    const StepRows rows{n, pos.data(), tok.data(), slot.data(), row0.data(), row_end.data(), decode, max_end};
    for (Side* s : {&cpu, &gpu}) {
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->pool->reserve(*s->seqs[i], p.n[i]));
      s->pool->sync_tables();
      s->ops->begin_rows(*s->pool, rows);
    }
    ASSERT_EQ(cpu.seqs[0]->cmp_pages(), gpu.seqs[0]->cmp_pages());
    for (int l = L0; l < L1; ++l) {
      const int li = l - L0, r = c.ratio(l);
      const uint32_t seed = static_cast<uint32_t>(1000 * st + 10 * l);
      const std::vector<float> kv = randv(static_cast<size_t>(n * hd), seed + 1);
      const LayerStorage& cs = cpu.pool->storage(li);
      const LayerStorage& gs = gpu.pool->storage(li);
      const size_t gmark = gpu.ops->mark(), cmark = cpu.ops->mark();
      // kv_store: the same rows encoded alike, byte for byte.
      for (Side* s : {&cpu, &gpu}) {
        const size_t m = s->ops->mark();
        s->ops->kv_store(*s->pool, li, put(*s->ops, kv));
        s->ops->release_to(m);
      }
      // (Only the rows this step wrote: the rest of a block is whatever the allocation held.)
      const size_t kv_bytes = static_cast<size_t>(lay.swa_blocks * lay.page * cs.kv.fmt.bytes);
      const std::vector<uint8_t> kc = fetch(*cpu.ops, cs.kv.base, kv_bytes), kg = fetch(*gpu.ops, gs.kv.base, kv_bytes);
      for (int i = 0; i < 3; ++i)
        for (int64_t q = cpu.seqs[i]->n_past(); q < cpu.seqs[i]->n_past() + p.n[i]; ++q) {
          const int32_t b = cpu.seqs[i]->swa_pages()[static_cast<size_t>(q / lay.page)];
          if (b < 0) continue;
          // Decoded (a packed row's tail past its last scale byte is padding nobody writes).
          const size_t at = (static_cast<size_t>(b) * lay.page + q % lay.page) * cs.kv.fmt.bytes;
          std::vector<float> rc(static_cast<size_t>(hd)), rg(rc.size());
          cpu::decode_row(cs.kv.fmt, kc.data() + at, rc.data());
          cpu::decode_row(cs.kv.fmt, kg.data() + at, rg.data());
          kv_bad += std::memcmp(rc.data(), rg.data(), rc.size() * 4) != 0;
        }
      // compressors (main, then the indexer's on CSA layers)
      for (const bool idx : {false, true}) {
        if (r == 0 || (idx && r != c.csa_ratio)) continue;
        const int co = idx ? 2 : c.compress_coff(l);
        const int64_t d = idx ? ID : hd;
        const std::vector<float> a = randv(static_cast<size_t>(n * co * d), seed + 2 + idx, 1.0f);
        const std::vector<float> g = randv(static_cast<size_t>(n * co * d), seed + 4 + idx, 2.0f);
        const CompressorWeights& w = idx ? iw[l] : cw[l];
        for (Side* s : {&cpu, &gpu}) {
          const size_t m = s->ops->mark();
          s->ops->compressor_update(*s->pool, li, idx, w, put(*s->ops, a), put(*s->ops, g), c.norm_eps, rope, num);
          s->ops->release_to(m);
        }
        const PagedRows& pc = idx ? cs.keys : cs.entries;
        const PagedRows& pg = idx ? gs.keys : gs.entries;
        const size_t bytes = static_cast<size_t>(lay.cmp_blocks) * pc.rows_per_block * pc.fmt.bytes;
        const std::vector<uint8_t> ec = fetch(*cpu.ops, pc.base, bytes), eg = fetch(*gpu.ops, pg.base, bytes);
        std::vector<float> vc(static_cast<size_t>(d)), vg(vc.size());
        double num2 = 0, den2 = 0;
        for (int i = 0; i < 3; ++i) {
          const int64_t entries = cpu.seqs[i]->n_past() / r + (p.n[i] + cpu.seqs[i]->n_past() % r) / r;
          for (int64_t e = 0; e < entries; ++e) {
            const int32_t b = cpu.seqs[i]->cmp_pages()[static_cast<size_t>(e / pc.rows_per_block)];
            const size_t at = (static_cast<size_t>(b) * pc.rows_per_block + e % pc.rows_per_block) * pc.fmt.bytes;
            cpu::decode_row(pc.fmt, ec.data() + at, vc.data());
            cpu::decode_row(pc.fmt, eg.data() + at, vg.data());
            for (int64_t ch = 0; ch < d; ++ch) {
              const double df = static_cast<double>(vg[ch]) - vc[ch];
              num2 += df * df;
              den2 += static_cast<double>(vc[ch]) * vc[ch];
              ++codes;
              code_diffs += vg[ch] != vc[ch];
            }
          }
        }
        if (den2 > 0) worst_entry = std::max(worst_entry, std::sqrt(num2 / den2));
        // The slots' raw rows this step wrote (the latest `ring` positions of each sequence):
        // copies of the inputs, exact.
        float* rkc = idx ? cs.iring_kv : cs.ring_kv;
        float* rkg = idx ? gs.iring_kv : gs.ring_kv;
        const int ring = lay.layers[static_cast<size_t>(li)].ring;
        const int64_t ring_floats = static_cast<int64_t>(lay.slots) * ring * co * d;
        const std::vector<uint8_t> rc = fetch(*cpu.ops, rkc, static_cast<size_t>(ring_floats) * 4),
                                   rg = fetch(*gpu.ops, rkg, static_cast<size_t>(ring_floats) * 4);
        for (int i = 0; i < 3; ++i) {
          const int64_t end = cpu.seqs[i]->n_past() + p.n[i];
          for (int64_t q = std::max<int64_t>(cpu.seqs[i]->n_past(), end - ring); q < end; ++q) {
            const size_t at = ((static_cast<size_t>(cpu.seqs[i]->slot()) * ring + q % ring) * co * d) * 4;
            ring_bad += std::memcmp(rc.data() + at, rg.data() + at, static_cast<size_t>(co * d) * 4) != 0;
          }
        }
        // The GPU pool takes the CPU's entries, so the next ops start from the same state.
        gpu.ops->upload(reinterpret_cast<float*>(pg.base), reinterpret_cast<const float*>(ec.data()),
                        static_cast<int64_t>(bytes / 4));
      }
      // indexer top-k
      const int64_t Hq = H * hd;
      std::vector<int32_t> sel_c, sel_g;
      int32_t* dsel = nullptr;
      int32_t* csel = nullptr;
      if (r == c.csa_ratio) {
        const std::vector<float> iq = randv(static_cast<size_t>(n * IH * ID), seed + 7);
        const std::vector<float> iwv = randv(static_cast<size_t>(n * IH), seed + 8, 0.02f);
        csel = reinterpret_cast<int32_t*>(cpu.ops->alloc(n * K));
        cpu.ops->indexer_topk(*cpu.pool, li, put(*cpu.ops, iq), put(*cpu.ops, iwv), static_cast<int>(IH), ID, K, csel);
        sel_c.assign(csel, csel + n * K);
        dsel = reinterpret_cast<int32_t*>(gpu.ops->alloc(n * K));
        gpu.ops->indexer_topk(*gpu.pool, li, put(*gpu.ops, iq), put(*gpu.ops, iwv), static_cast<int>(IH), ID, K, dsel);
        sel_g.resize(static_cast<size_t>(n * K));
        gpu.ops->download(reinterpret_cast<float*>(sel_g.data()), reinterpret_cast<const float*>(dsel), n * K);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<int32_t> x(sel_c.begin() + t * K, sel_c.begin() + (t + 1) * K),
              y(sel_g.begin() + t * K, sel_g.begin() + (t + 1) * K);
          order_diffs += x != y;
          std::sort(x.begin(), x.end());
          std::sort(y.begin(), y.end());
          set_bad += x != y;
        }
        // Both attend to the CPU's choice.
        gpu.ops->upload(reinterpret_cast<float*>(dsel), reinterpret_cast<const float*>(sel_c.data()), n * K);
      }
      // attention
      const std::vector<float> q = randv(static_cast<size_t>(n * Hq), seed + 9);
      const std::vector<float>& sinks = layer_sinks[static_cast<size_t>(l)];
      std::vector<float> out_c(static_cast<size_t>(n * Hq)), out_g(out_c.size());
      {
        float* o = cpu.ops->alloc(n * Hq);
        cpu.ops->attention(*cpu.pool, li, put(*cpu.ops, q), c, put(*cpu.ops, kv), r > 0, csel, K, sinks, o);
        std::memcpy(out_c.data(), o, out_c.size() * 4);
        float* og = gpu.ops->alloc(n * Hq);
        gpu.ops->attention(*gpu.pool, li, put(*gpu.ops, q), c, put(*gpu.ops, kv), r > 0, dsel, K, sinks, og);
        gpu.ops->download(out_g.data(), og, n * Hq);
      }
      double num2 = 0, den2 = 0;
      for (size_t i = 0; i < out_c.size(); ++i) {
        const double df = static_cast<double>(out_g[i]) - out_c[i];
        num2 += df * df;
        den2 += static_cast<double>(out_c[i]) * out_c[i];
      }
      worst_attn = std::max(worst_attn, std::sqrt(num2 / den2));
      cpu.ops->release_to(cmark);
      gpu.ops->release_to(gmark);
    }
    for (Side* s : {&cpu, &gpu}) {
      s->ops->end_rows();
      for (int i = 0; i < 3; ++i) s->pool->advance(*s->seqs[i], p.n[i]);
    }
  }
  std::printf("[state-ops] %s: kv rows differing %lld; entries rel %.3e (%lld of %lld values differ); slot rows "
              "differing %lld; top-k sets differing %lld (order %lld); attention rel %.3e\n",
              model ? "model (FP8/FP4 rows)" : "reference (F32 rows)", static_cast<long long>(kv_bad), worst_entry,
              static_cast<long long>(code_diffs), static_cast<long long>(codes), static_cast<long long>(ring_bad),
              static_cast<long long>(set_bad), static_cast<long long>(order_diffs), worst_attn);
  EXPECT_EQ(kv_bad, 0);
  EXPECT_EQ(ring_bad, 0);
  EXPECT_EQ(set_bad, 0);
  EXPECT_LE(worst_attn, 1e-5);
  // Entries: the GPU pools in float, the CPU in double: within 1e-5 in F32 rows; in FP8/FP4
  // rows that difference may move a value across a rounding boundary, rarely.
  if (!model) EXPECT_LE(worst_entry, 1e-5);
  else EXPECT_LE(static_cast<double>(code_diffs), 1e-3 * static_cast<double>(codes));
#endif
}

INSTANTIATE_TEST_SUITE_P(Forms, StateOps, testing::Values(false, true),
                         [](const auto& i) { return std::string(i.param ? "packed_model" : "f32_reference"); });
