// The CUDA backend of the op interface: the kernels of kernels/cuda on one DeviceContext.
// First version, built for correctness: activations and weights live on the GPU (weights
// uploaded from the shard's f32 tensors on first use), while the per-sequence bookkeeping
// (SWA ring, compressor windows, compressed rows) stays in the host SequenceState and is
// copied in and out around each call. That keeps one authoritative state for both backends;
// keeping the state on the device and capturing decode in a graph are the next steps.
#ifdef HS_HAVE_CUDA
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "engine/cpu_ops.h"
#include "engine/engine.h"
#include "kernels/cuda/glue.h"
#include "kernels/cuda/ops_cuda.h"
#include "util/error.h"

namespace hs {

namespace {

class CudaOps : public Ops {
 public:
  CudaOps(int device, ThreadPool& pool) : ctx_(device), host_(pool) {
    HS_CHECK(device >= 0 && device < cuda::device_count(), "device cuda:", device, " does not exist (",
             cuda::device_count(), " CUDA device(s) found)");
  }
  const char* name() const override { return "cuda"; }

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
    ctx_.download(host, src, static_cast<size_t>(n) * 4);
    ctx_.synchronize();
  }

  // ---- dense ops
  void embed(const Mat& table, const int32_t* tokens, int64_t n, int hc, float* X) override {
    const size_t m = mark();
    const int32_t* ids = upload_i32(tokens, n);
    float* rows = alloc(n * table.cols);
    cuda::dequantize_rows(ctx_, weight(table), ids, 0, n, rows);
    cuda::broadcast_streams(ctx_, rows, n, hc, table.cols, X);
    release_to(m);
  }
  void matmul(const Mat& W, const float* x, int64_t n, float* y) override { cuda::matmul(ctx_, weight(W), x, n, y); }
  void grouped_matmul(const Mat& W, int groups, const float* x, int64_t n, float* y) override {
    cuda::grouped_matmul(ctx_, weight(W), groups, x, n, y);
  }
  void rmsnorm(const float* x, const std::vector<float>& w, int64_t rows, float eps, float* y) override {
    cuda::rmsnorm(ctx_, x, vec(w), rows, static_cast<int64_t>(w.size()), eps, y);
  }
  void rmsnorm_unweighted(float* x, int64_t rows, int64_t d, float eps) override {
    cuda::rmsnorm(ctx_, x, nullptr, rows, d, eps, x);
  }
  void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
            int sign) override {
    const size_t m = mark();
    const int64_t* p = upload_i64(pos, n);
    cuda::rope(ctx_, x, n, heads, head_dim, t.rope_dim, p, vec(t.inv_freq), sign);
    release_to(m);
  }
  void copy(float* dst, const float* src, int64_t n) override { ctx_.copy(dst, src, static_cast<size_t>(n) * 4); }
  void scale(float* x, int64_t n, float s) override { cuda::scale(ctx_, x, n, s); }
  void add(float* y, const float* x, int64_t n) override { cuda::add(ctx_, y, x, n); }

  void hc_pre(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* u, float* post,
              float* comb) override {
    cuda::hc_pre(ctx_, hc_params(w, c), X, n, u, post, comb);
  }
  void hc_post(const float* y, const float* post, const float* comb, int64_t n, const ModelConfig& c,
               float* X) override {
    cuda::hc_post(ctx_, y, post, comb, n, c.hc_mult, c.dim, X);
  }
  void hc_head(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* h) override {
    cuda::hc_head(ctx_, hc_params(w, c), X, n, h);
  }

  // ---- state-touching ops: the host SequenceState stays authoritative (see the file comment)
  void compressor_update(CompressorState& st, const CompressorWeights& w, const float* a, const float* g, int64_t n,
                         float eps, const RopeTable& rope, Numerics num, EntryQat qat) override {
    const int64_t width = st.coff * st.d;
    std::vector<float> ha(static_cast<size_t>(n * width)), hg(ha.size());
    download(ha.data(), a, n * width);
    download(hg.data(), g, n * width);
    host_.compressor_update(st, w, ha.data(), hg.data(), n, eps, rope, num, qat);
  }

  std::vector<std::vector<int32_t>> indexer_topk(const float* q, const float* w, int64_t n, int ih, int64_t id,
                                                 const CompressorState& keys, const int64_t* pos, int ratio,
                                                 int k) override {
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
    const int64_t E = keys.n_entries;
    if (E == 0) return out;
    const size_t m = mark();
    float* dkeys = alloc(E * id);
    upload(dkeys, keys.entries.data(), E * id);
    const int64_t* dpos = upload_i64(pos, n);
    float* score = alloc(n * E);
    cuda::indexer_scores(ctx_, q, w, n, ih, id, dkeys, E, dpos, ratio, score);
    const int kk = static_cast<int>(std::min<int64_t>(k, E));
    int32_t* dsel = reinterpret_cast<int32_t*>(alloc(n * kk));
    cuda::topk(ctx_, score, n, E, dpos, ratio, kk, dsel);
    std::vector<int32_t> sel(static_cast<size_t>(n * kk));
    ctx_.download(sel.data(), dsel, sel.size() * 4);
    ctx_.synchronize();
    release_to(m);
    for (int64_t t = 0; t < n; ++t)
      for (int j = 0; j < kk; ++j)
        if (sel[static_cast<size_t>(t * kk + j)] >= 0) out[static_cast<size_t>(t)].push_back(sel[static_cast<size_t>(t * kk + j)]);
    return out;
  }

  void attention(const float* q, int64_t n, const ModelConfig& c, const LayerState& st, const float* kv_chunk,
                 int64_t p0, const CompressorState* comp, const std::vector<std::vector<int32_t>>& selected,
                 const std::vector<float>& sinks, float* out) override {
    const int64_t hd = c.head_dim, W = c.window;
    const int64_t E = comp ? comp->n_entries : 0;
    const size_t m = mark();
    // One row pool: [ring (W) | this chunk's rows (n) | compressed entries (E)].
    float* pool = alloc((W + n + E) * hd);
    upload(pool, st.ring.data(), W * hd);
    ctx_.copy(pool + W * hd, kv_chunk, static_cast<size_t>(n * hd) * 4);
    if (E) upload(pool + (W + n) * hd, comp->entries.data(), E * hd);
    std::vector<std::vector<int32_t>> rows(static_cast<size_t>(n));
    size_t ld = 1;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t p = p0 + t;
      auto& r = rows[static_cast<size_t>(t)];
      for (int64_t s = std::max<int64_t>(0, p - W + 1); s <= p; ++s)
        r.push_back(static_cast<int32_t>(s >= p0 ? W + (s - p0) : s % W));
      if (comp) {
        const int64_t visible = std::min<int64_t>(E, (p + 1) / comp->ratio);
        if (selected.empty()) {
          for (int64_t i = 0; i < visible; ++i) r.push_back(static_cast<int32_t>(W + n + i));
        } else {
          for (int32_t i : selected[static_cast<size_t>(t)]) {
            HS_CHECK(i >= 0 && i < visible, "internal: indexer chose entry ", i, " of ", visible, " visible");
            r.push_back(static_cast<int32_t>(W + n + i));
          }
        }
      }
      ld = std::max(ld, r.size());
    }
    std::vector<int32_t> flat(static_cast<size_t>(n) * ld, 0), counts(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      const auto& r = rows[static_cast<size_t>(t)];
      std::copy(r.begin(), r.end(), flat.begin() + static_cast<int64_t>(t * ld));
      counts[static_cast<size_t>(t)] = static_cast<int32_t>(r.size());
    }
    cuda::AttnRows ar{pool, upload_i32(flat.data(), static_cast<int64_t>(flat.size())),
                      upload_i32(counts.data(), n), static_cast<int64_t>(ld)};
    cuda::attention_sink(ctx_, q, n, c.n_heads, hd, ar, vec(sinks), 1.0f / std::sqrt(static_cast<float>(hd)), out);
    release_to(m);
  }

  void ring_store(LayerState& st, const float* kv_chunk, int64_t n, int64_t p0, int window,
                  int64_t head_dim) override {
    std::vector<float> h(static_cast<size_t>(n * head_dim));
    download(h.data(), kv_chunk, n * head_dim);
    host_.ring_store(st, h.data(), n, p0, window, head_dim);
  }

  void moe(const LayerWeights& w, const ModelConfig& c, const float* x, const int32_t* tokens, int64_t n,
           Numerics num, float* y) override {
    HS_CHECK(num == Numerics::Reference, "CUDA MoE: model numerics not implemented yet");
    const int E = c.n_experts, K = c.n_active_experts;
    const int64_t D = c.dim, I = c.moe_inter;
    const size_t m0 = mark();
    float* logits = alloc(n * E);
    cuda::matmul(ctx_, weight(w.gate), x, n, logits);
    const int32_t* dtok = upload_i32(tokens, n);
    int32_t* didx = reinterpret_cast<int32_t*>(alloc(n * K));
    float* dw = alloc(n * K);
    cuda::moe_route(ctx_, logits, n, E, K, w.gate_bias.empty() ? nullptr : vec(w.gate_bias),
                    w.tid2eid.empty() ? nullptr : ivec(w.tid2eid), dtok, c.route_scale, didx, dw);
    std::vector<int32_t> idx(static_cast<size_t>(n * K));
    std::vector<float> wt(idx.size());
    ctx_.download(idx.data(), didx, idx.size() * 4);
    ctx_.download(wt.data(), dw, wt.size() * 4);
    ctx_.synchronize();
    ctx_.fill_bytes(y, 0, static_cast<size_t>(n * D) * 4);
    float* g = alloc(n * I);
    float* u = alloc(n * I);
    float* h = alloc(n * I);
    float* d = alloc(n * D);
    float* xs = alloc(n * D);
    for (int e = 0; e < E; ++e) {  // ascending expert id, as the CPU reference adds them
      std::vector<int32_t> toks;
      std::vector<float> tw;
      for (int64_t t = 0; t < n; ++t)
        for (int k = 0; k < K; ++k)
          if (idx[static_cast<size_t>(t * K + k)] == e) {
            toks.push_back(static_cast<int32_t>(t));
            tw.push_back(wt[static_cast<size_t>(t * K + k)]);
          }
      if (toks.empty()) continue;
      const int64_t mm = static_cast<int64_t>(toks.size());
      const size_t m1 = mark();
      const int32_t* dt = upload_i32(toks.data(), mm);
      float* dwt = alloc(mm);
      upload(dwt, tw.data(), mm);
      cuda::gather_rows(ctx_, x, dt, mm, D, xs);
      cuda::matmul(ctx_, weight(w.w1[static_cast<size_t>(e)]), xs, mm, g);
      cuda::matmul(ctx_, weight(w.w3[static_cast<size_t>(e)]), xs, mm, u);
      cuda::swiglu_clamp(ctx_, g, u, mm * I, c.swiglu_limit, h);
      cuda::matmul(ctx_, weight(w.w2[static_cast<size_t>(e)]), h, mm, d);
      cuda::scatter_add_rows(ctx_, d, dt, dwt, mm, D, y);
      release_to(m1);
    }
    cuda::matmul(ctx_, weight(w.sh_w1), x, n, g);
    cuda::matmul(ctx_, weight(w.sh_w3), x, n, u);
    cuda::swiglu_clamp(ctx_, g, u, n * I, c.swiglu_limit, h);
    cuda::matmul(ctx_, weight(w.sh_w2), h, n, d);
    cuda::add(ctx_, y, d, n * D);
    release_to(m0);
  }

  // The model-numerics round trips have CPU twins only so far (make_ops refuses the mode).
  void round_bf16(float*, int64_t) override { fail("CUDA: model numerics not implemented yet"); }
  void act_quant_fp8(float*, int64_t, int64_t) override { fail("CUDA: model numerics not implemented yet"); }
  void kv_fp8_sim(float*, int64_t, int64_t, int64_t) override { fail("CUDA: model numerics not implemented yet"); }
  void indexer_fp4_sim(float*, int64_t, int64_t) override { fail("CUDA: model numerics not implemented yet"); }

 private:
  struct Block {
    cuda::DeviceBuffer buf;
    size_t top = 0;
  };

  // Device copies of the shard's tensors, keyed by the host object. The shards (and so these
  // addresses) live exactly as long as this backend: one Engine owns both.
  const cuda::WeightView& weight(const Mat& m) {
    auto it = weights_.find(&m);
    if (it == weights_.end())
      it = weights_.emplace(&m, cuda::upload_gguf_weight(ctx_, GgmlType::F32, m.w.data(), m.rows, m.cols)).first;
    return it->second.view;
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

  cuda::DeviceContext ctx_;
  CpuOps host_;  // the host half of the state bookkeeping
  std::vector<Block> blocks_;
  size_t cur_ = 0;
  std::vector<std::pair<size_t, size_t>> stack_;  // (block, top before the allocation)
  std::unordered_map<const void*, cuda::DeviceWeight> weights_;
  std::unordered_map<const void*, cuda::DeviceBuffer> vectors_;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(int device, ThreadPool& pool) { return std::make_unique<CudaOps>(device, pool); }

}  // namespace hs
#endif  // HS_HAVE_CUDA
