// The CUDA backend of the op interface: the kernels of kernels/cuda on one DeviceContext.
// Weights are uploaded in their stored form as the shard loads them (Ops::adopt_weight) and
// live only on the device. The shards' state pools live on the device too (state_pool.h);
// the host knows every count from the positions, so the forward never waits for the GPU
// except where the logits are downloaded.
#ifdef HS_HAVE_CUDA
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "engine/cpu_ops.h"
#include "engine/cuda_profile.h"
#include "format/quants.h"
#include "util/fp.h"
#include "engine/engine.h"
#include "kernels/cuda/glue.h"
#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/quant_sim_cuda.h"
#include "kernels/cuda/paged_state_cuda.h"
#include "kernels/cuda/synth_fill_cuda.h"
#include "util/error.h"

namespace hs {

namespace {

class CudaOps : public Ops {
 public:
  CudaOps(int device, Numerics numerics) : ctx_(checked(device)), numerics_(numerics), prof_(ctx_.stream(), ctx_.device()) {}
  const char* name() const override { return "cuda"; }

  // ---- weights: uploaded in stored form as they are loaded; the host copy is dropped
  WeightForm weight_form() const override { return WeightForm::Native; }
  void adopt_weight(Mat& m) override {
    weight(m);
    m.w.clear();
    m.w.shrink_to_fit();
    m.native = NativeTensor{};
  }
  int64_t weight_bytes(const Mat& m) const override {
    if (!m.device) return m.rows * m.cols * 4;
    const cuda::WeightView& v = static_cast<const cuda::DeviceWeight*>(m.device.get())->view;
    return v.data_bytes() + v.scale_bytes();
  }
  double copy_bandwidth_gbs() override { return cuda::measure_copy_gbs(ctx_); }

  // ---- the state pools' memory (engine/state_pool.h), on this device
  struct DeviceMemory : StateMemory {
    cuda::DeviceBuffer buf;
    void* data() const override { return buf.data(); }
  };
  std::unique_ptr<StateMemory> alloc_state(size_t bytes) override {
    auto m = std::make_unique<DeviceMemory>();
    m->buf = ctx_.alloc(std::max<size_t>(bytes, 256));
    return m;
  }
  void state_copy(void* dst, const void* src, size_t bytes) override { ctx_.copy(dst, src, bytes); }
  void state_upload(void* dst, const void* host, size_t bytes) override { ctx_.upload(dst, host, bytes); }
  // What the weights left, less room for activations and scratch (4 GiB and a tenth of the GPU).
  int64_t state_memory_hint() const override {
    size_t free = 0, total = 0;
    {
      cuda::DeviceGuard g(ctx_.device());
      HS_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    }
    const int64_t reserve = (int64_t{4} << 30) + static_cast<int64_t>(total / 10);
    return std::max<int64_t>(static_cast<int64_t>(free) - reserve, int64_t{256} << 20);
  }
  void set_profiling(bool on) override { prof_.enable(on); }
  void set_moe_ksplit(int gate_up, int down) override { moe_tune_.gate_up_ksplit = gate_up, moe_tune_.down_ksplit = down; }
  void set_pdl(bool on) override { ctx_.set_pdl(on); }
  void set_fused_handover(bool on) override { fused_handover_ = on; }
  std::string profile_report() override { return prof_.report(); }

  // ---- memory: a stack of allocations over blocks that only grow (never moved or freed early)
  float* alloc(int64_t n) override {
    const size_t bytes = (static_cast<size_t>(std::max<int64_t>(n, 1)) * 4 + 255) / 256 * 256;
    if (blocks_.empty() || blocks_[cur_].top + bytes > blocks_[cur_].buf.bytes()) {
      size_t next = cur_ + 1;
      while (next < blocks_.size() && blocks_[next].buf.bytes() < bytes) ++next;
      if (blocks_.empty() || next >= blocks_.size()) {
        const size_t cap = std::max<size_t>(bytes, blocks_.empty() ? (64u << 20) : blocks_.back().buf.bytes() * 2);
        blocks_.push_back(Block{ctx_.alloc(cap), 0});
        next = blocks_.size() - 1;
      }
      cur_ = blocks_.empty() ? 0 : next;
    }
    Block& b = blocks_[cur_];
    float* p = reinterpret_cast<float*>(static_cast<char*>(b.buf.data()) + b.top);
    stack_.push_back({cur_, b.top});
    b.top += bytes;
    return p;
  }
  size_t mark() const override { return stack_.size(); }
  void release_to(size_t m) override {
    while (stack_.size() > m) {
      blocks_[stack_.back().first].top = stack_.back().second;
      cur_ = stack_.back().first;
      stack_.pop_back();
    }
  }
  void upload(float* dst, const float* host, int64_t n) override { ctx_.upload(dst, host, static_cast<size_t>(n) * 4); }
  void download(float* host, const float* src, int64_t n) override {
    ctx_.download(host, src, static_cast<size_t>(n) * 4);  // (waits for the stream)
  }
  // Sampling on the device (cuda::sample): one launch per run of rows with equal parameters
  // (any greedy rows count as equal), then only the token ids are downloaded.
  bool can_sample() const override { return true; }
  bool sample(const float* logits, int64_t rows, int64_t vocab, std::span<const DeviceSampling> specs,
              int32_t* tokens_host) override {
    HS_CHECK(static_cast<int64_t>(specs.size()) == rows, "sample: ", specs.size(), " specs for ", rows, " rows");
    if (rows <= 0) return true;
    auto prof = prof_.scope("sample");
    auto params = [](const DeviceSampling& d) {
      const bool greedy = d.temperature <= 0.f || d.top_k == 1;
      return greedy ? cuda::SamplingParams{0.f, 0, 1.f, 0.f} : cuda::SamplingParams{d.temperature, d.top_k, d.top_p, d.min_p};
    };
    const size_t m = mark();
    auto* out = reinterpret_cast<int32_t*>(alloc(rows));
    // Constrained rows: their masks go up and are applied to a copy of the logits.
    bool masked = false;
    for (const DeviceSampling& d : specs) masked = masked || d.allowed;
    if (masked) {
      const int64_t words = (vocab + 63) / 64;
      std::vector<uint64_t> bits(static_cast<size_t>(rows * words), ~uint64_t{0});
      for (int64_t r = 0; r < rows; ++r)
        if (const uint64_t* a = specs[static_cast<size_t>(r)].allowed)
          std::copy(a, a + words, bits.begin() + r * words);
      auto* dbits = reinterpret_cast<uint64_t*>(alloc(rows * words * 2));
      ctx_.upload(dbits, bits.data(), bits.size() * 8);
      float* copy = alloc(rows * vocab);
      ctx_.copy(copy, logits, static_cast<size_t>(rows * vocab) * 4);
      cuda::mask_tokens(ctx_, copy, rows, vocab, dbits);
      logits = copy;
    }
    for (int64_t r = 0; r < rows;) {
      const cuda::SamplingParams sp = params(specs[static_cast<size_t>(r)]);
      std::vector<float> u;
      int64_t e = r;
      for (; e < rows; ++e) {
        const cuda::SamplingParams q = params(specs[static_cast<size_t>(e)]);
        if (q.temperature != sp.temperature || q.top_k != sp.top_k || q.top_p != sp.top_p || q.min_p != sp.min_p) break;
        u.push_back(specs[static_cast<size_t>(e)].u);
      }
      cuda::sample(ctx_, logits + r * vocab, e - r, vocab, sp, u, out + r);
      r = e;
    }
    ctx_.download(tokens_host, out, static_cast<size_t>(rows) * 4);  // (waits for the stream)
    release_to(m);
    return true;
  }
  void* send_to(Ops& dst, float* dst_ptr, const float* src, int64_t n) override {
    auto* other = dynamic_cast<CudaOps*>(&dst);
    if (!other) return nullptr;
    return ctx_.send(other->ctx_, dst_ptr, src, static_cast<size_t>(n) * 4);
  }
  void accept(void* token) override { ctx_.accept(static_cast<cudaEvent_t>(token)); }
  int device_index() const override { return ctx_.device(); }
  void synchronize() override { ctx_.synchronize(); }

  // ---- a step's rows (ops.h StepRows) in one device block, and graphs (engine/step_graphs.h)
  void begin_rows(const StatePool& pool, const StepRows& r) override {
    (void)pool;
    HS_CHECK(r.n >= 1, "internal: a step of no rows");
    // One upload: pos int64 [n], then tokens, slots, row0, row_end int32 [n] each.
    const size_t bytes = static_cast<size_t>(r.n) * 24;
    if (rows_buf_.bytes() < bytes) rows_buf_ = ctx_.alloc(std::max<size_t>(bytes * 2, 64 * 24));
    rows_host_.resize(bytes);
    uint8_t* h = rows_host_.data();
    std::memcpy(h, r.pos, static_cast<size_t>(r.n) * 8);
    std::memcpy(h + r.n * 8, r.tokens, static_cast<size_t>(r.n) * 4);
    std::memcpy(h + r.n * 12, r.slot, static_cast<size_t>(r.n) * 4);
    std::memcpy(h + r.n * 16, r.row0, static_cast<size_t>(r.n) * 4);
    std::memcpy(h + r.n * 20, r.row_end, static_cast<size_t>(r.n) * 4);
    ctx_.upload(rows_buf_.data(), h, bytes);
    rows_pos_host_.assign(r.pos, r.pos + r.n);
    rows_n_ = r.n;
    rows_decode_ = r.decode;
    // Entry capacities: a decode step's grids are sized by a power of two at or above the
    // furthest position (so one capture lasts until a sequence passes it); other steps exactly.
    int64_t e = std::max<int64_t>(r.max_end, 1);
    if (r.decode) {
      int64_t b = 256;
      while (b < e) b <<= 1;
      e = b;
    }
    end_cap_ = e;
    rows_active_ = true;
  }
  void end_rows() override { rows_active_ = false; }
  int64_t padded_rows(int64_t n) const override {
    if (n <= 8) {
      int64_t b = 1;
      while (b < n) b <<= 1;
      return b;
    }
    int64_t b = 8;  // then 12, 16, 24, 32, 48, 64, ...: at most a third of a step is padding
    while (b < n) b = b % 3 == 0 ? b / 3 * 4 : b / 2 * 3;
    return b;
  }
  bool step_key(std::vector<uint64_t>& key) override {
    key.push_back(reinterpret_cast<uintptr_t>(rows_buf_.data()));
    key.push_back(static_cast<uint64_t>(end_cap_));
    key.push_back(ctx_.scratch_generation());
    key.push_back(blocks_.size());  // where the next alloc() lands: the capture's scratch addresses
    key.push_back(cur_);
    key.push_back(blocks_.empty() ? 0 : blocks_[cur_].top);
    return true;
  }
  bool can_capture() const override { return !prof_.on(); }
  struct CudaGraph : Graph {
    cuda::CapturedGraph g;
    size_t nodes() const override { return g.nodes(); }
  };
  void begin_capture() override { ctx_.begin_capture(); }
  std::unique_ptr<Graph> end_capture() override {
    auto g = std::make_unique<CudaGraph>();
    g->g = ctx_.end_capture();
    return g;
  }
  void abort_capture() override { ctx_.abort_capture(); }
  void replay(const Graph& g) override { ctx_.launch(static_cast<const CudaGraph&>(g).g); }

  // ---- dense ops
  void embed(const Mat& table, const int32_t* tokens, int64_t n, int hc, float* X) override {
    auto prof = prof_.scope("embed");
    const size_t m = mark();
    const int32_t* ids = upload_i32(tokens, n);
    float* rows = alloc(n * table.cols);
    cuda::dequantize_rows(ctx_, weight(table), ids, 0, n, rows);
    cuda::broadcast_streams(ctx_, rows, n, hc, table.cols, X);
    release_to(m);
  }
  void matmul(const Mat& W, const float* x, int64_t n, float* y) override {
    auto prof = prof_.scope("matmul", [&] { return describe(W, n); });
    try {
      cuda::matmul(ctx_, weight(W), x, n, y, gemm_mode());
    } catch (const Error& e) {  // which product failed: the kernels know only the shapes
      throw Error(cat("matmul of", describe(W, n), " over ", n, " rows: ", e.what()));
    }
  }
  void matmuls(const Mat* const* W, float* const* y, int count, const float* x, int64_t n) override {
    constexpr int kMax = 8;
    if (n == 1 && count >= 2 && count <= kMax) {
      cuda::WeightView v[kMax];
      for (int i = 0; i < count; ++i) v[i] = weight(*W[i]);
      if (cuda::matvec_same_input_ok(v, count)) {
        auto prof = prof_.scope("matmuls", [&] { return describe(*W[0], n) + " and " + std::to_string(count - 1) + " more"; });
        cuda::matvec_same_input(ctx_, v, y, count, x);
        return;
      }
    }
    Ops::matmuls(W, y, count, x, n);
  }
  void grouped_matmul(const Mat& W, int groups, const float* x, int64_t n, float* y) override {
    auto prof = prof_.scope("grouped_matmul", [&] { return describe(W, n); });
    try {
      cuda::grouped_matmul(ctx_, weight(W), groups, x, n, y, gemm_mode());
    } catch (const Error& e) {
      throw Error(cat("grouped_matmul of", describe(W, n), " in ", groups, " groups over ", n, " rows: ", e.what()));
    }
  }
  void rmsnorm(const float* x, const std::vector<float>& w, int64_t rows, float eps, float* y) override {
    auto prof = prof_.scope("rmsnorm");
    cuda::rmsnorm(ctx_, x, vec(w), rows, static_cast<int64_t>(w.size()), eps, y);
  }
  void rmsnorm_unweighted(float* x, int64_t rows, int64_t d, float eps) override {
    auto prof = prof_.scope("rmsnorm");
    cuda::rmsnorm(ctx_, x, nullptr, rows, d, eps, x);
  }
  void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
            int sign) override {
    auto prof = prof_.scope("rope");
    rope_impl(x, n, heads, head_dim, t, pos, sign, {});
  }
  void rope_bf16(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
                 int sign, Bf16Round r) override {
    auto prof = prof_.scope("rope_bf16");
    rope_impl(x, n, heads, head_dim, t, pos, sign, r);
  }
  void rmsnorm_bf16(float* x, const std::vector<float>& w, int64_t rows, float eps, float* y, Bf16Round r) override {
    auto prof = prof_.scope("rmsnorm_bf16");
    cuda::rmsnorm_bf16(ctx_, x, vec(w), rows, static_cast<int64_t>(w.size()), eps, y, {r.in, r.out});
  }
  void rmsnorm_bf16_fp8(float* x, const std::vector<float>& w, int64_t rows, float eps, float* y, float* yq,
                        Bf16Round r) override {
    auto prof = prof_.scope("rmsnorm_bf16_fp8");
    cuda::rmsnorm_bf16(ctx_, x, vec(w), rows, static_cast<int64_t>(w.size()), eps, y, {r.in, r.out}, yq);
  }
  void rmsnorm_rope_bf16(float* x, const std::vector<float>* w, int64_t n, int64_t heads, int64_t head_dim, float eps,
                         const RopeTable& t, const int64_t* pos, Bf16Round norm_r, Bf16Round rope_r) override {
    auto prof = prof_.scope("rmsnorm_rope");
    if (n <= 0) return;
    const size_t m = mark();
    const DevPos d = dev_positions(pos, n);
    cuda::rmsnorm_rope(ctx_, x, w ? vec(*w) : nullptr, n, heads, head_dim, eps, {norm_r.in, norm_r.out}, t.rope_dim,
                       d.p, d.p0, d.stride, vec(t.inv_freq), {rope_r.in, rope_r.out});
    release_to(m);
  }
  void rmsnorm_unweighted_bf16(float* x, int64_t rows, int64_t d, float eps, Bf16Round r) override {
    auto prof = prof_.scope("rmsnorm_bf16");
    cuda::rmsnorm_bf16(ctx_, x, nullptr, rows, d, eps, x, {r.in, r.out});
  }
  void scale_bf16(float* x, int64_t n, float s, Bf16Round r) override {
    auto prof = prof_.scope("scale");
    cuda::scale_bf16(ctx_, x, n, s, {r.in, r.out});
  }
  void hc_post_bf16(const float* y, const float* post, const float* comb, int64_t n, const ModelConfig& c,
                    float* X) override {
    auto prof = prof_.scope("hc_post");
    cuda::hc_post(ctx_, y, post, comb, n, c.hc_mult, c.dim, X, true);
  }
  void hc_post_pre(const float* y, const float* post_in, const float* comb_in, bool post_round, int64_t n,
                   const ModelConfig& c, float* X, const HcNext& next) override {
    if (!fused_handover_ || !cuda::hc_post_pre_norm_fits(ctx_, c.hc_mult, c.dim, n) || next.xq == next.xn)
      return Ops::hc_post_pre(y, post_in, comb_in, post_round, n, c, X, next);
    auto prof = prof_.scope("hc_post_pre");
    cuda::hc_post_pre_norm(ctx_, hc_params(*next.w, c), y, post_in, comb_in, post_round, X, n, next.u, next.post,
                           next.comb, vec(*next.norm), c.norm_eps, {next.r.in, next.r.out}, next.xn, next.xq);
  }
  void copy(float* dst, const float* src, int64_t n) override {
    auto prof = prof_.scope("copy");
    ctx_.copy(dst, src, static_cast<size_t>(n) * 4);
  }
  void scale(float* x, int64_t n, float s) override {
    auto prof = prof_.scope("scale");
    cuda::scale(ctx_, x, n, s);
  }
  void add(float* y, const float* x, int64_t n) override {
    auto prof = prof_.scope("add");
    cuda::add(ctx_, y, x, n);
  }

  void hc_pre(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* u, float* post,
              float* comb) override {
    auto prof = prof_.scope("hc_pre");
    cuda::hc_pre(ctx_, hc_params(w, c), X, n, u, post, comb);
  }
  void hc_post(const float* y, const float* post, const float* comb, int64_t n, const ModelConfig& c,
               float* X) override {
    auto prof = prof_.scope("hc_post");
    cuda::hc_post(ctx_, y, post, comb, n, c.hc_mult, c.dim, X);
  }
  void hc_head(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* h) override {
    auto prof = prof_.scope("hc_head");
    cuda::hc_head(ctx_, hc_params(w, c), X, n, h);
  }
  void hc_stream_mean(const float* X, int64_t n, const ModelConfig& c, float* out, int64_t stride) override {
    auto prof = prof_.scope("hc_stream_mean");
    cuda::hc_stream_mean(ctx_, X, n, c.hc_mult, c.dim, out, stride);
  }

  // ---- state ops (ops.h) over the step's rows, on the shard's pool (kernels/cuda/paged_state_cuda.h)
  void kv_store(const StatePool& pool, int layer, const float* kv) override {
    auto prof = prof_.scope("kv_store");
    cuda::kv_store_paged(ctx_, dev_rows(), tables(pool), pool.storage(layer).kv, kv);
  }
  void compressor_update(const StatePool& pool, int layer, bool indexer, const CompressorWeights& w, const float* a,
                         const float* g, float eps, const RopeTable& rope, Numerics num) override {
    auto prof = prof_.scope(indexer ? "indexer_compressor" : "compressor");
    const StateLayout::Layer& y = pool.layout().layers[static_cast<size_t>(layer)];
    const LayerStorage& st = pool.storage(layer);
    cuda::CompressorPaged c;
    c.dst = indexer ? st.keys : st.entries;
    c.ring_kv = indexer ? st.iring_kv : st.ring_kv;
    c.ring_gate = indexer ? st.iring_gate : st.ring_gate;
    c.ring = y.ring;
    c.ratio = y.ratio;
    c.coff = indexer ? 2 : y.coff;
    c.rope_dim = rope.rope_dim;
    c.ape = vec(w.ape);
    c.norm = vec(w.norm);
    c.inv_freq = vec(rope.inv_freq);
    c.eps = eps;
    c.model = num == Numerics::Model;
    cuda::compressor_paged(ctx_, dev_rows(), tables(pool), c, a, g, rows_decode_);
  }
  void indexer_topk(const StatePool& pool, int layer, const float* q, const float* w, int ih, int64_t id, int k,
                    int32_t* sel) override {
    auto prof = prof_.scope("indexer_topk");
    const int r = pool.layout().layers[static_cast<size_t>(layer)].ratio;
    const PagedRows& keys = pool.storage(layer).keys;
    const int64_t n = rows_n_, ld = entry_cap(r);
    const size_t m = mark();
    float* score = alloc(n * ld);
    const cuda::DevRows dr = dev_rows();
    const cuda::KeySource ks{keys.base, keys.fmt, keys.rows_per_block, pool.cmp_table(), pool.layout().max_pages,
                             dr.slot};
    cuda::indexer_scores(ctx_, q, w, n, ih, id, ks, ld, dr.pos, r, score);
    cuda::topk(ctx_, score, n, ld, dr.pos, r, k, sel);  // pads with -1 where fewer than k are visible
    release_to(m);
  }
  void attention(const StatePool& pool, int layer, const float* q, const ModelConfig& c, const float* kv_chunk,
                 bool compressed, const int32_t* sel, int k, const std::vector<float>& sinks, float* out) override {
    auto prof = prof_.scope("attention");
    const int r = compressed ? pool.layout().layers[static_cast<size_t>(layer)].ratio : 0;
    const LayerStorage& st = pool.storage(layer);
    const int64_t n = rows_n_, hd = c.head_dim;
    const int64_t ld = c.window + (r ? (sel ? k : entry_cap(r)) : 0);
    const size_t m = mark();
    auto* rows = reinterpret_cast<int32_t*>(alloc(n * ld));
    auto* counts = reinterpret_cast<int32_t*>(alloc(n));
    cuda::attention_rows_paged(ctx_, dev_rows(), tables(pool), c.window, r, st.entries.rows_per_block, sel, k, rows,
                               counts, ld);
    cuda::AttnRows ar;
    ar.kv = kv_chunk;
    ar.rows = rows;
    ar.n_rows = counts;
    ar.rows_ld = ld;
    ar.kv1 = st.kv.base;
    ar.fmt1 = st.kv.fmt;
    ar.kv2 = st.entries.base;
    ar.fmt2 = st.entries.fmt;
    cuda::attention_sink(ctx_, q, n, c.n_heads, hd, ar, vec(sinks), 1.0f / std::sqrt(static_cast<float>(hd)), out);
    release_to(m);
  }

  void attention_dense(const float* q, int64_t nq, int64_t heads, int64_t hd, const float* rows, int64_t n_rows,
                       const std::vector<float>& sinks, float scale, float* out) override {
    auto prof = prof_.scope("attention_dense");
    const size_t m = mark();
    float* kv = alloc(n_rows * hd);
    ctx_.upload(kv, rows, static_cast<size_t>(n_rows * hd) * 4);
    std::vector<int32_t> idx(static_cast<size_t>(nq * n_rows));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i % static_cast<size_t>(n_rows));
    cuda::AttnRows ar;
    ar.kv = kv;
    ar.rows = upload_i32(idx.data(), nq * n_rows);
    ar.rows_ld = n_rows;
    cuda::attention_sink(ctx_, q, nq, heads, hd, ar, vec(sinks), scale, out);
    release_to(m);
  }

  // MoE: router and routing on the device, then cuda::moe_experts for the routed and the shared
  // experts, with the rounding points of CpuOps::moe under model numerics (the FP8 input
  // quantisation is per row, so it is done once before the experts). Nothing waits for the host.
  void moe(const LayerWeights& w, const ModelConfig& c, const float* x, const float* xq, const int32_t* tokens,
           int64_t n, Numerics num, float* y) override {
    auto prof = prof_.scope("moe", [&] {
      return n <= cuda::kMatvecMaxCols ? std::string(" n<=8") : n <= cuda::kMoeDecodeMaxTokens ? " n<=32 (decode x8)" : " n>32";
    });
    const bool model = num == Numerics::Model;
    const int E = c.n_experts, K = c.n_active_experts;
    const int64_t D = c.dim, I = c.moe_inter;
    const size_t m0 = mark();
    float* logits = alloc(n * E);
    cuda::matmul(ctx_, weight(w.gate), x, n, logits, gemm_mode());
    const bool hash = !w.tid2eid.empty();
    // Only hash layers read the tokens (a decode step's are in the step block).
    const int32_t* dtok = !hash ? nullptr : rows_active_ && n == rows_n_ ? rows_tok() : upload_i32(tokens, n);
    int32_t* didx = reinterpret_cast<int32_t*>(alloc(n * K));
    float* dw = alloc(n * K);
    cuda::moe_route(ctx_, logits, n, E, K, w.gate_bias.empty() ? nullptr : vec(w.gate_bias),
                    hash ? ivec(w.tid2eid) : nullptr, dtok, c.route_scale, didx, dw);
    const float* xin = model ? xq : x;
    if (model && !xq) {
      float* own = alloc(n * D);
      act_quant_fp8_copy(own, x, n, D, false);
      xin = own;
    }
    void* ws = alloc(static_cast<int64_t>((cuda::moe_experts_workspace_bytes(n, K, D, I, E) + 3) / 4));
    const cuda::MoeShared shared{weight(w.sh_w1), weight(w.sh_w3), weight(w.sh_w2)};
    cuda::moe_experts(ctx_, weight(w.w1), weight(w.w3), weight(w.w2), E, xin, n, didx, dw, K, c.swiglu_limit,
                      gemm_mode(), ws, y, &shared, model, moe_tune_);
    release_to(m0);
  }

  // The model-numerics round trips, bit-exact with their CPU twins (test_backend_ops_numerics).
  void round_bf16(float* x, int64_t n) override {
    auto prof = prof_.scope("round_bf16");
    cuda::round_bf16(ctx_, x, n);
  }
  void act_quant_fp8(float* x, int64_t rows, int64_t cols) override {
    auto prof = prof_.scope("act_quant_fp8");
    cuda::act_quant_fp8(ctx_, x, rows, cols);
  }
  void act_quant_fp8_copy(float* dst, const float* src, int64_t rows, int64_t cols, bool round_in) override {
    auto prof = prof_.scope("act_quant_fp8");
    cuda::act_quant_fp8(ctx_, dst, src, rows, cols, round_in);
  }
  void kv_fp8_sim(float* x, int64_t rows, int64_t head_dim, int64_t channels) override {
    auto prof = prof_.scope("kv_fp8_sim");
    cuda::kv_fp8_sim(ctx_, x, rows, head_dim, channels);
  }
  void indexer_fp4_sim(float* x, int64_t rows, int64_t d) override {
    auto prof = prof_.scope("indexer_fp4_sim");
    cuda::indexer_fp4_sim(ctx_, x, rows, d);
  }

 private:
  struct Block {
    cuda::DeviceBuffer buf;
    size_t top = 0;
  };

  std::string describe(const Mat& W, int64_t n) {  // a profile row: shape, device type, path
    std::string s = " ";  // (appends: GCC 12 warns falsely on a + chain here)
    s += std::to_string(W.rows);
    s += 'x';
    s += std::to_string(W.cols);
    s += ' ';
    s += cuda::wtype_name(weight(W).type);
    s += ' ';
    s += cuda::matmul_path_name(cuda::matmul_path(weight(W), n, gemm_mode()));
    return s;
  }

  static int checked(int device) {
    HS_CHECK(device >= 0 && device < cuda::device_count(), "device cuda:", device, " does not exist (",
             cuda::device_count(), " CUDA device(s) found)");
    return device;
  }
  // Reference numerics multiply in f32 at every batch size; model numerics may use BF16 tensor cores.
  cuda::GemmMode gemm_mode() const {
    return numerics_ == Numerics::Reference ? cuda::GemmMode::F32 : cuda::GemmMode::Auto;
  }

  // The device copy of a matrix, made from its stored form on first use (normally when the
  // loader hands it to adopt_weight) and kept in the Mat itself, so it lives as long as the
  // shard's weights.
  const cuda::WeightView& weight(const Mat& m) {
    if (!m.device) {
      auto dw = std::make_shared<cuda::DeviceWeight>(upload(m));
      m.device = dw;
    }
    return static_cast<const cuda::DeviceWeight*>(m.device.get())->view;
  }
  cuda::DeviceWeight upload(const Mat& m) {
    const NativeTensor& nt = m.native;
    // Shapes the device layouts cannot take (model widths always fit; the tiny test models do
    // not) go up as exact f32: FP8 blocks that a row slice would cut, 2-byte rows that are not
    // whole 16-byte chunks.
    const bool fp8_odd = nt.kind == NativeTensor::Kind::Fp8Block && (m.rows % 128 != 0 || m.cols % 128 != 0);
    const bool half_odd = nt.kind == NativeTensor::Kind::Gguf &&
                          (nt.type == GgmlType::F16 || nt.type == GgmlType::BF16) && m.cols % 8 != 0;
    if (fp8_odd || half_odd) {
      std::vector<float> f(static_cast<size_t>(m.rows * m.cols));
      if (half_odd) {
        dequantize_row(nt.type, nt.data, f.data(), m.rows * m.cols);
      } else {
        dequantize_fp8_block128(nt.data, m.rows, m.cols, [&](int64_t b) { return e8m0_to_f32(nt.scales[b]); },
                                f.data());
      }
      return cuda::upload_gguf_weight(ctx_, GgmlType::F32, f.data(), m.rows, m.cols);
    }
    switch (nt.kind) {
      case NativeTensor::Kind::Gguf:
        return cuda::upload_gguf_weight(ctx_, nt.type, nt.data, m.rows, m.cols);
      case NativeTensor::Kind::Fp8Block:
        return cuda::upload_fp8_weight(ctx_, nt.data, nt.scales, m.rows, m.cols);
      case NativeTensor::Kind::DeviceFill: {
        if (!synth_) synth_ = std::make_unique<cuda::SynthPool>(ctx_);
        const cuda::SynthType t = nt.fp8 ? cuda::SynthType::fp8() : cuda::SynthType::gguf(nt.type);
        return cuda::make_random_weight(ctx_, *synth_, t, m.rows, m.cols, nt.seed);
      }
      case NativeTensor::Kind::None:
        break;
    }
    HS_CHECK(static_cast<int64_t>(m.w.size()) == m.rows * m.cols, "internal: matrix [", m.rows, ", ", m.cols,
             "] has neither stored bytes nor f32 values");
    return cuda::upload_gguf_weight(ctx_, GgmlType::F32, m.w.data(), m.rows, m.cols);
  }
  // Device copy of a host vector of the shard (norm weights, HC parameters, tid2eid, ...).
  template <typename T>
  const T* device_copy(const std::vector<T>& v) {
    auto it = vectors_.find(&v);
    if (it == vectors_.end()) {
      cuda::DeviceBuffer b = ctx_.alloc(std::max<size_t>(v.size(), 1) * sizeof(T));
      if (!v.empty()) ctx_.upload(b.data(), v.data(), v.size() * sizeof(T));
      it = vectors_.emplace(&v, std::move(b)).first;
    }
    return it->second.template as<T>();
  }
  const float* vec(const std::vector<float>& v) { return device_copy(v); }
  const int32_t* ivec(const std::vector<int32_t>& v) { return device_copy(v); }
  const int32_t* upload_i32(const int32_t* host, int64_t n) {
    auto* p = reinterpret_cast<int32_t*>(alloc(n));
    ctx_.upload(p, host, static_cast<size_t>(n) * 4);
    return p;
  }
  const int64_t* upload_i64(const int64_t* host, int64_t n) {
    auto* p = reinterpret_cast<int64_t*>(alloc(2 * n));
    ctx_.upload(p, host, static_cast<size_t>(n) * 8);
    return p;
  }
  cuda::HcParams hc_params(const HcWeights& w, const ModelConfig& c) {
    cuda::HcParams p;
    p.fn = vec(w.fn);
    p.base = vec(w.base);
    p.scale = vec(w.scale);
    p.hc = c.hc_mult;
    p.dim = c.dim;
    p.sinkhorn_iters = c.hc_sinkhorn_iters;
    p.hc_eps = c.hc_eps;
    p.norm_eps = c.norm_eps;
    return p;
  }

  // Positions of n rows on the device: the step block's in a decode step, else p0 + t where they
  // are consecutive (no array to upload), else an uploaded array (scratch: release_to a mark
  // taken before).
  struct DevPos {
    const int64_t* p = nullptr;
    int64_t p0 = 0, stride = 0;
  };
  DevPos dev_positions(const int64_t* pos, int64_t n) {
    if (rows_active_ && n == rows_n_) {
      check_step_rows(pos, n);
      return {rows_pos(), 0, 0};
    }
    bool affine = true;
    for (int64_t i = 1; i < n && affine; ++i) affine = pos[i] == pos[0] + i;
    return affine ? DevPos{nullptr, pos[0], 1} : DevPos{upload_i64(pos, n), 0, 0};
  }
  // RoPE at the rows' positions; with r, the rounded variant.
  void rope_impl(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
                 int sign, Bf16Round r) {
    const size_t m = mark();
    const DevPos d = dev_positions(pos, n);
    if (r.in || r.out)
      cuda::rope_bf16(ctx_, x, n, heads, head_dim, t.rope_dim, d.p, d.p0, d.stride, vec(t.inv_freq), sign,
                      {r.in, r.out});
    else
      cuda::rope_affine(ctx_, x, n, heads, head_dim, t.rope_dim, d.p, d.p0, d.stride, vec(t.inv_freq), sign);
    release_to(m);
  }

  // The step's rows on the device (begin_rows).
  const int64_t* rows_pos() const { return rows_buf_.as<int64_t>(); }
  const int32_t* rows_i32(int k) const { return reinterpret_cast<const int32_t*>(rows_pos() + rows_n_) + k * rows_n_; }
  const int32_t* rows_tok() const { return rows_i32(0); }
  cuda::DevRows dev_rows() const {
    HS_CHECK(rows_active_, "internal: a state op outside a step");
    return {rows_pos(), rows_i32(1), rows_i32(2), rows_i32(3), rows_n_};
  }
  static cuda::PageTables tables(const StatePool& pool) {
    return {pool.cmp_table(), pool.swa_table(), pool.layout().max_pages, pool.layout().page};
  }
  // Entries a row list or score row of a layer with ratio r has room for.
  int64_t entry_cap(int r) const { return std::max<int64_t>(1, (end_cap_ + r - 1) / r); }
  // Row-wise ops of a step cover all its rows, at the block's positions.
  void check_step_rows(const int64_t* pos, int64_t n) const {
    HS_CHECK(n == rows_n_, "internal: an op over ", n, " rows in a step of ", rows_n_);
    if (pos)
      for (int64_t i = 0; i < n; ++i)
        HS_CHECK(pos[i] == rows_pos_host_[static_cast<size_t>(i)], "internal: row ", i, " at position ", pos[i],
                 ", the step block says ", rows_pos_host_[static_cast<size_t>(i)]);
  }

  cuda::DeviceContext ctx_;
  Numerics numerics_;
  cuda::DeviceBuffer rows_buf_;
  std::vector<uint8_t> rows_host_;
  std::vector<int64_t> rows_pos_host_;
  int64_t rows_n_ = 0, end_cap_ = 0;
  bool rows_active_ = false, rows_decode_ = false;
  std::unique_ptr<cuda::SynthPool> synth_;  // pools of random quantised rows (synthetic models)
  CudaOpProfile prof_;
  cuda::MoeTuning moe_tune_;  // EngineOptions::moe_ksplit
  bool fused_handover_ = false;  // EngineOptions::fused_handover
  std::vector<Block> blocks_;
  size_t cur_ = 0;
  std::vector<std::pair<size_t, size_t>> stack_;  // (block, top before the allocation)
  std::unordered_map<const void*, cuda::DeviceBuffer> vectors_;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(int device, Numerics numerics) {
  return std::make_unique<CudaOps>(device, numerics);
}

}  // namespace hs
#endif  // HS_HAVE_CUDA
