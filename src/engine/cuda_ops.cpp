// The CUDA backend of the op interface: the kernels of kernels/cuda on one DeviceContext.
// Weights are uploaded in their stored form as the shard loads them (Ops::adopt_weight) and
// live only on the device. Each sequence's state lives on the device too (cuda_state.h):
// the SWA ring, the compressor windows and the compressed entries; the host SequenceState
// keeps only the counters, which the host knows without asking the GPU (how many rows a
// window holds, how many entries exist follow from the positions). The forward therefore
// never waits for the GPU except where the logits are downloaded.
#ifdef HS_HAVE_CUDA
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "engine/cpu_ops.h"
#include "engine/cuda_profile.h"
#include "engine/cuda_state.h"
#include "format/quants.h"
#include "util/fp.h"
#include "engine/engine.h"
#include "kernels/cuda/glue.h"
#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/quant_sim_cuda.h"
#include "kernels/cuda/state_cuda.h"
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
  bool host_state() const override { return false; }  // cuda_state.h
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
  void set_profiling(bool on) override { prof_.enable(on); }
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

  // ---- step mode and graphs (ops.h; engine/step_graphs.h)
  bool prepare_step(const ModelConfig& c, std::span<SequenceState* const> seqs, std::vector<uint64_t>& key) override {
    const int64_t n = static_cast<int64_t>(seqs.size());
    if (step_cap_ < n) {  // the block: positions int64 [cap], then tokens int32 [cap]
      step_cap_ = std::max<int64_t>(64, 2 * n);
      step_buf_ = ctx_.alloc(static_cast<size_t>(step_cap_) * 12);
    }
    auto word = [&](const void* p) { key.push_back(reinterpret_cast<uintptr_t>(p)); };
    word(step_buf_.data());
    key.push_back(ctx_.scratch_generation());
    key.push_back(blocks_.size());  // where the next alloc() lands: the capture's scratch addresses
    key.push_back(cur_);
    key.push_back(blocks_.empty() ? 0 : blocks_[cur_].top);
    for (SequenceState* s : seqs) {
      for (LayerState& st : s->layers) {
        word(CudaRing::of(st, ctx_, c.window, c.head_dim).data());
        for (CompressorState* cs : {&st.comp, &st.index}) {
          if (cs->ratio <= 0) continue;
          CudaCompressorState& dev = CudaCompressorState::of(*cs, ctx_);
          dev.reserve_entries(cs->n_entries + 1, cs->n_entries);  // room for the entry this step may close
          word(dev.buf_kv());
          word(dev.entries());
          key.push_back(static_cast<uint64_t>(dev.capacity()));
          key.push_back((cs->buf_n + 1 == cs->ratio ? 1u : 0u) | (cs->has_prev ? 2u : 0u));
        }
      }
    }
    return true;
  }
  void begin_step(const int64_t* pos, const int32_t* tokens, int64_t n) override {
    HS_CHECK(n >= 1 && n <= step_cap_, "internal: a step of ", n, " rows, the step block holds ", step_cap_);
    step_pos_host_.assign(pos, pos + n);
    ctx_.upload(step_pos(), pos, static_cast<size_t>(n) * 8);
    ctx_.upload(step_tok(), tokens, static_cast<size_t>(n) * 4);
    step_n_ = n;
    step_seq_ = 0;
    step_active_ = true;
  }
  void end_step() override { step_active_ = false; }
  void step_sequence(size_t i) override { step_seq_ = i; }
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
    cuda::matmul(ctx_, weight(W), x, n, y, gemm_mode());
  }
  void grouped_matmul(const Mat& W, int groups, const float* x, int64_t n, float* y) override {
    auto prof = prof_.scope("grouped_matmul", [&] { return describe(W, n); });
    cuda::grouped_matmul(ctx_, weight(W), groups, x, n, y, gemm_mode());
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

  // ---- state-touching ops: the data on the device (cuda_state.h), the counters on the host
  void compressor_update(CompressorState& st, const CompressorWeights& w, const float* a, const float* g, int64_t n,
                         float eps, const RopeTable& rope, Numerics num, EntryQat qat) override {
    auto prof = prof_.scope("compressor_update");
    CudaCompressorState& dev = CudaCompressorState::of(st, ctx_);
    const int r = st.ratio;
    const int64_t d = st.d, width = st.coff * d;
    const int64_t nw = (st.buf_n + n) / r, rem = (st.buf_n + n) % r;
    // A decode step (step mode) reads its position from the step block: the open window's row
    // is p % r, a closing window's entry is (p + 1) / r - 1 at position p + 1 - r.
    const int64_t* sp = step_active_ ? step_seq_pos(n) : nullptr;
    if (sp) HS_CHECK(st.buf_n == step_pos_host_[step_seq_] % r, "internal: compressor window of ", st.buf_n,
                     " rows at position ", step_pos_host_[step_seq_], " (ratio ", r, ")");
    if (nw == 0) {  // the window stays open: append the rows
      if (sp) {
        cuda::store_row_at(ctx_, dev.buf_kv(), a, dev.buf_gate(), g, width, sp, 0, 1, r);
      } else {
        ctx_.copy(dev.buf_kv() + st.buf_n * width, a, static_cast<size_t>(n * width) * 4);
        ctx_.copy(dev.buf_gate() + st.buf_n * width, g, static_cast<size_t>(n * width) * 4);
      }
      st.buf_n += static_cast<int>(n);
      return;
    }
    dev.reserve_entries(st.n_entries + nw, st.n_entries);
    const size_t m = mark();
    const int slots = st.coff * r;
    float* kv = alloc(nw * slots * d);
    float* gate = alloc(nw * slots * d);
    float* prev = st.coff == 2 ? alloc(2 * r * d) : nullptr;
    cuda::compressor_gather(ctx_, dev.buffers(), st.buf_n, st.has_prev, a, g, n, vec(w.ape), nw, kv, gate, prev);
    float* out = sp ? alloc(nw * d) : dev.entries() + st.n_entries * d;
    const bool model = num == Numerics::Model;  // the rounding points of CpuOps::compressor_update
    cuda::compress_pool(ctx_, kv, gate, slots, d, nw, out);
    if (model)
      cuda::rmsnorm_bf16(ctx_, out, vec(w.norm), nw, d, eps, out, {true, true});
    else
      cuda::rmsnorm(ctx_, out, vec(w.norm), nw, d, eps, out);
    if (sp)
      cuda::rope_affine(ctx_, out, nw, 1, d, rope.rope_dim, sp, 1 - r, 0, vec(rope.inv_freq), +1);
    else
      cuda::rope_affine(ctx_, out, nw, 1, d, rope.rope_dim, st.n_entries * r, r, vec(rope.inv_freq), +1);
    if (model && qat == EntryQat::Fp8Kv) kv_fp8_sim(out, nw, d, d - rope.rope_dim);
    if (model && qat == EntryQat::IndexerFp4) indexer_fp4_sim(out, nw, d);
    if (model && qat == EntryQat::None) cuda::round_bf16(ctx_, out, nw * d);
    if (sp) cuda::store_row_at(ctx_, dev.entries(), out, nullptr, nullptr, d, sp, 1 - r, r, INT64_MAX);
    // The rows after the last closed window all come from this chunk.
    if (rem) {
      ctx_.copy(dev.buf_kv(), a + (n - rem) * width, static_cast<size_t>(rem * width) * 4);
      ctx_.copy(dev.buf_gate(), g + (n - rem) * width, static_cast<size_t>(rem * width) * 4);
    }
    if (st.coff == 2) {
      ctx_.copy(dev.prev(), prev, static_cast<size_t>(2 * r * d) * 4);
      st.has_prev = true;
    }
    st.n_entries += nw;
    st.buf_n = static_cast<int>(rem);
    release_to(m);
  }

  void indexer_topk(const float* q, const float* w, int64_t n, int ih, int64_t id, const CompressorState& keys,
                    int64_t p0, int ratio, int k, int32_t* sel) override {
    auto prof = prof_.scope("indexer_topk");
    if (step_active_) {  // a decode step: scores over the capacity, visibility from the step block
      const int64_t* sp = step_seq_pos(n);
      CudaCompressorState& dev = CudaCompressorState::of(keys, ctx_);
      const int64_t cap = dev.capacity();
      HS_CHECK(cap >= keys.n_entries && cap > 0, "internal: indexer keys beyond their capacity");
      const size_t m = mark();
      float* score = alloc(n * cap);
      cuda::indexer_scores(ctx_, q, w, n, ih, id, dev.entries(), cap, sp, ratio, score);
      cuda::topk(ctx_, score, n, cap, sp, ratio, k, sel);  // pads with -1 where fewer than k are visible
      release_to(m);
      return;
    }
    const int64_t E = keys.n_entries;
    const int kk = static_cast<int>(std::min<int64_t>(k, E));
    if (kk < k) ctx_.fill_bytes(sel, 0xff, static_cast<size_t>(n * k) * 4);  // -1 padding
    if (E == 0) return;
    const size_t m = mark();
    float* score = alloc(n * E);
    const int64_t* pos = positions(p0, n);
    cuda::indexer_scores(ctx_, q, w, n, ih, id, CudaCompressorState::of(keys, ctx_).entries(), E, pos, ratio, score);
    if (kk == k) {
      cuda::topk(ctx_, score, n, E, pos, ratio, k, sel);
    } else {
      int32_t* top = reinterpret_cast<int32_t*>(alloc(n * kk));
      cuda::topk(ctx_, score, n, E, pos, ratio, kk, top);
      HS_CUDA_CHECK(cudaMemcpy2DAsync(sel, static_cast<size_t>(k) * 4, top, static_cast<size_t>(kk) * 4,
                                      static_cast<size_t>(kk) * 4, static_cast<size_t>(n), cudaMemcpyDeviceToDevice,
                                      ctx_.stream()));
    }
    release_to(m);
  }

  void attention(const float* q, int64_t n, const ModelConfig& c, const LayerState& st, const float* kv_chunk,
                 int64_t p0, const CompressorState* comp, const int32_t* sel, int k, const std::vector<float>& sinks,
                 float* out) override {
    auto prof = prof_.scope("attention");
    const int64_t hd = c.head_dim;
    const int ratio = comp ? comp->ratio : 0;
    // A decode step's row list holds any position's rows: the window, then k selected entries or
    // every entry up to the capacity (the kernel reads the position and counts the visible ones).
    const int64_t* sp = step_active_ ? step_seq_pos(n) : nullptr;
    if (sp) HS_CHECK(p0 == step_pos_host_[step_seq_], "internal: attention at ", p0, ", the step block says ",
                     step_pos_host_[step_seq_]);
    const int64_t E = !comp ? 0 : sp ? CudaCompressorState::of(*comp, ctx_).capacity() : comp->n_entries;
    const int64_t ld = sp ? c.window + (ratio ? (sel ? k : E) : 0)
                          : cuda::attention_rows_ld(n, p0, c.window, ratio, E, sel != nullptr, k);
    const size_t m = mark();
    auto* rows = reinterpret_cast<int32_t*>(alloc(n * ld));
    auto* counts = reinterpret_cast<int32_t*>(alloc(n));
    cuda::attention_rows(ctx_, n, p0, c.window, ratio, E, sel, k, rows, counts, ld, sp);
    cuda::AttnRows ar{kv_chunk, rows, counts, ld, CudaRing::of(st, ctx_, c.window, hd).data(),
                      comp && E ? CudaCompressorState::of(*comp, ctx_).entries() : nullptr};
    cuda::attention_sink(ctx_, q, n, c.n_heads, hd, ar, vec(sinks), 1.0f / std::sqrt(static_cast<float>(hd)), out);
    release_to(m);
  }

  void ring_store(LayerState& st, const float* kv_chunk, int64_t n, int64_t p0, int window,
                  int64_t head_dim) override {
    auto prof = prof_.scope("ring_store");
    float* ring = CudaRing::of(st, ctx_, window, head_dim).data();
    if (step_active_) {  // a decode step: slot p % window, p from the step block
      cuda::store_row_at(ctx_, ring, kv_chunk, nullptr, nullptr, head_dim, step_seq_pos(n), 0, 1, window);
      return;
    }
    // The last min(n, window) rows, position p at slot p % window: at most two runs.
    const int64_t first = std::max<int64_t>(0, n - window);
    int64_t t = first;
    while (t < n) {
      const int64_t slot = (p0 + t) % window;
      const int64_t run = std::min<int64_t>(n - t, window - slot);
      ctx_.copy(ring + slot * head_dim, kv_chunk + t * head_dim, static_cast<size_t>(run * head_dim) * 4);
      t += run;
    }
  }

  // MoE: router and routing on the device, then cuda::moe_experts for the routed and the shared
  // experts, with the rounding points of CpuOps::moe under model numerics (the FP8 input
  // quantisation is per row, so it is done once before the experts). Nothing waits for the host.
  void moe(const LayerWeights& w, const ModelConfig& c, const float* x, const int32_t* tokens, int64_t n,
           Numerics num, float* y) override {
    auto prof = prof_.scope("moe", [&] { return " n" + std::string(n > 8 ? ">8" : "<=8"); });
    const bool model = num == Numerics::Model;
    const int E = c.n_experts, K = c.n_active_experts;
    const int64_t D = c.dim, I = c.moe_inter;
    const size_t m0 = mark();
    float* logits = alloc(n * E);
    cuda::matmul(ctx_, weight(w.gate), x, n, logits, gemm_mode());
    const bool hash = !w.tid2eid.empty();
    // Only hash layers read the tokens (a decode step's are in the step block).
    if (step_active_) check_step_rows(nullptr, n);
    const int32_t* dtok = !hash ? nullptr : step_active_ ? step_tok() : upload_i32(tokens, n);
    int32_t* didx = reinterpret_cast<int32_t*>(alloc(n * K));
    float* dw = alloc(n * K);
    cuda::moe_route(ctx_, logits, n, E, K, w.gate_bias.empty() ? nullptr : vec(w.gate_bias),
                    hash ? ivec(w.tid2eid) : nullptr, dtok, c.route_scale, didx, dw);
    const float* xin = x;
    if (model) {
      float* xq = alloc(n * D);
      act_quant_fp8_copy(xq, x, n, D, false);
      xin = xq;
    }
    void* ws = alloc(static_cast<int64_t>((cuda::moe_experts_workspace_bytes(n, K, D, I, E) + 3) / 4));
    const cuda::MoeShared shared{weight(w.sh_w1), weight(w.sh_w3), weight(w.sh_w2)};
    cuda::moe_experts(ctx_, weight(w.w1), weight(w.w3), weight(w.w2), E, xin, n, didx, dw, K, c.swiglu_limit,
                      gemm_mode(), ws, y, &shared, model);
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
    s += n > cuda::kMatvecMaxCols ? " gemm" : " matvec";
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

  // Device positions p0 .. p0 + n - 1 (the indexer kernels take an array); reuploaded only
  // when (p0, n) changes. The buffer is only rewritten in stream order, after its readers.
  const int64_t* positions(int64_t p0, int64_t n) {
    if (p0 != pos_p0_ || n != pos_n_) {
      if (pos_buf_.bytes() < static_cast<size_t>(n) * 8) pos_buf_ = ctx_.alloc(static_cast<size_t>(n) * 16);
      std::vector<int64_t> h(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) h[static_cast<size_t>(i)] = p0 + i;
      ctx_.upload(pos_buf_.data(), h.data(), h.size() * 8);
      pos_p0_ = p0;
      pos_n_ = n;
    }
    return pos_buf_.as<int64_t>();
  }

  // RoPE at the rows' positions: the step block's in a decode step, else p0 + t where they are
  // consecutive (no array to upload), else an uploaded array; with r, the rounded variant.
  void rope_impl(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
                 int sign, Bf16Round r) {
    const size_t m = mark();
    const int64_t* p = nullptr;
    int64_t p0 = 0, stride = 0;
    if (step_active_) {
      check_step_rows(pos, n);
      p = step_pos();
    } else {
      bool affine = true;
      for (int64_t i = 1; i < n && affine; ++i) affine = pos[i] == pos[0] + i;
      if (affine) {
        p0 = pos[0];
        stride = 1;
      } else {
        p = upload_i64(pos, n);
      }
    }
    if (r.in || r.out)
      cuda::rope_bf16(ctx_, x, n, heads, head_dim, t.rope_dim, p, p0, stride, vec(t.inv_freq), sign, {r.in, r.out});
    else
      cuda::rope_affine(ctx_, x, n, heads, head_dim, t.rope_dim, p, p0, stride, vec(t.inv_freq), sign);
    release_to(m);
  }

  // The step block (step mode): device positions and tokens of the step's rows.
  int64_t* step_pos() const { return step_buf_.as<int64_t>(); }
  int32_t* step_tok() const { return reinterpret_cast<int32_t*>(step_pos() + step_cap_); }
  // The current sequence's position in the block (its one row; step mode runs decode steps).
  const int64_t* step_seq_pos(int64_t n) const {
    HS_CHECK(n == 1 && step_seq_ < static_cast<size_t>(step_n_), "internal: step mode with ", n,
             " rows for sequence ", step_seq_, " of ", step_n_);
    return step_pos() + step_seq_;
  }
  // Row-wise ops of a step cover all its rows, at the block's positions.
  void check_step_rows(const int64_t* pos, int64_t n) const {
    HS_CHECK(n == step_n_, "internal: an op over ", n, " rows in a step of ", step_n_);
    if (pos)
      for (int64_t i = 0; i < n; ++i)
        HS_CHECK(pos[i] == step_pos_host_[static_cast<size_t>(i)], "internal: row ", i, " at position ", pos[i],
                 ", the step block says ", step_pos_host_[static_cast<size_t>(i)]);
  }

  cuda::DeviceContext ctx_;
  Numerics numerics_;
  cuda::DeviceBuffer step_buf_;
  int64_t step_cap_ = 0, step_n_ = 0;
  size_t step_seq_ = 0;
  bool step_active_ = false;
  std::vector<int64_t> step_pos_host_;
  std::unique_ptr<cuda::SynthPool> synth_;
  CudaOpProfile prof_;  // pools of random quantised rows (synthetic models)
  cuda::DeviceBuffer pos_buf_;
  int64_t pos_p0_ = -1, pos_n_ = -1;
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
