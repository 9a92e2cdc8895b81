// The op interface the forward pass (engine/shard.cpp) is written against. CpuOps is the
// reference implementation (kernels/cpu); the CUDA backend implements the same interface.
// Activation pointers are backend memory: the forward never reads or writes them itself.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/state_pool.h"
#include "engine/weights.h"

namespace hs {

// reference: f32 everywhere (what the HF fixtures use). model: DeepSeek's inference numerics
// (BF16 storage, FP8 activation quantisation, FP8 KV and Hadamard+FP4 indexer round trips).
enum class Numerics { Reference, Model };

struct RopeTable {
  int rope_dim = 0;
  std::vector<float> inv_freq;  // [rope_dim / 2]
};

// The rows of one step over a shard (Shard::forward_batch builds it, the state ops read it):
// row i is at position pos[i] of the sequence in pool slot slot[i]; that sequence's rows of
// this step are rows [row0[i], row_end[i]) (at row0 it is at its n_past). Padding rows (a
// decode step rounded up to a graph's row count) have slot -1: no state op reads or writes
// for them, and their attention output is zero. Host arrays of n entries.
struct StepRows {
  int64_t n = 0;
  const int64_t* pos = nullptr;
  const int32_t* tokens = nullptr;
  const int32_t* slot = nullptr;
  const int32_t* row0 = nullptr;
  const int32_t* row_end = nullptr;
  bool decode = false;        // every sequence has one row
  int64_t max_end = 0;        // largest position + 1 of a real row
};

// One row's sampling on a backend (Ops::sample), with cuda::sample's semantics (ops_cuda.h;
// Sampler's host path follows the same contract): temperature <= 0 or top_k == 1 is greedy
// (argmax, ties to the lower id), else top_k, then min_p, then top_p on the survivors, and the
// draw u in [0, 1) (Sampler::next_uniform, so the request's seed decides).
struct DeviceSampling {
  float temperature = 1.0f;
  int top_k = 0;        // 0: off
  float top_p = 1.0f;   // (0, 1]; 1: off
  float min_p = 0.0f;   // [0, 1]; 0: off
  float u = 0.0f;       // [0, 1); unused when greedy
  // A constrained request's mask (TokenConstraint::allowed, host memory, valid for the call):
  // only tokens whose bit is set may be drawn. Null: no mask.
  const uint64_t* allowed = nullptr;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;

  // How this backend wants the shard's matrices loaded, and its hook to take each one as it
  // is loaded (a device backend uploads it and drops the host bytes).
  virtual WeightForm weight_form() const { return WeightForm::F32; }
  virtual void adopt_weight(Mat&) {}
  // ---- state pool storage (engine/state_pool.h): persistent backend memory (host memory on
  // the CPU), copies within it, uploads into it (page tables), and how much the backend
  // suggests for the pools when not told (the CPU: a share of RAM; a GPU: of its free memory).
  class StateMemory {
   public:
    virtual ~StateMemory() = default;
    virtual void* data() const = 0;
  };
  virtual std::unique_ptr<StateMemory> alloc_state(size_t bytes) = 0;
  virtual void state_copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void state_upload(void* dst, const void* host, size_t bytes) = 0;
  virtual int64_t state_memory_hint() const = 0;
  // Bytes a pass over the matrix reads on this backend (its stored form on a device).
  virtual int64_t weight_bytes(const Mat& m) const { return m.rows * m.cols * 4; }
  // Measured device copy bandwidth (GB/s, read + write) for roofline figures; 0 where the
  // backend has none to offer (the CPU).
  virtual double copy_bandwidth_gbs() { return 0.0; }
  // Per-op device time (bench --profile): recording on/off, and the table of what was recorded.
  virtual void set_profiling(bool) {}
  // Tuning of the decode MoE kernels (EngineOptions::moe_ksplit); backends without them ignore it.
  virtual void set_moe_ksplit(int /*gate_up*/, int /*down*/) {}
  // Programmatic dependent launch of the backend's kernels (EngineOptions::pdl); others ignore it.
  virtual void set_pdl(bool /*on*/) {}
  // The hand-over between sub-layers as one launch where the backend has it
  // (EngineOptions::fused_handover); others run hc_post_pre's three ops whatever it says.
  virtual void set_fused_handover(bool /*on*/) {}
  virtual std::string profile_report() { return {}; }

  // Scratch memory, stack-like: alloc() hands out backend memory until release_to(mark())
  // returns everything allocated after the mark.
  virtual float* alloc(int64_t n) = 0;
  virtual size_t mark() const = 0;
  virtual void release_to(size_t mark) = 0;
  // Copies between host memory and backend memory (a plain copy on the CPU backend);
  // download waits for the backend's queued work.
  virtual void upload(float* dst, const float* host, int64_t n) = 0;
  virtual void download(float* host, const float* src, int64_t n) = 0;
  // Token sampling on the backend: one token per row of logits [rows, vocab] (backend memory)
  // by specs[row] into tokens_host (host memory; waits for the backend), so only the ids cross
  // to the host. Returns false, touching nothing, where the backend has no sampler (the CPU:
  // the caller downloads the logits and samples on the host). can_sample() says which, up front.
  virtual bool can_sample() const { return false; }
  virtual bool sample(const float* logits, int64_t rows, int64_t vocab, std::span<const DeviceSampling> specs,
                      int32_t* tokens_host) {
    (void)logits, (void)rows, (void)vocab, (void)specs, (void)tokens_host;
    return false;
  }
  virtual void synchronize() {}  // waits for the backend's queued work (benchmarks)
  // The HC state between shards on two devices of one backend kind, in two halves (each called
  // on the thread that drives that side): send_to() queues a copy of n floats into dst's memory
  // after the work that made `src` and returns a token, or nullptr when this pair cannot (the
  // engine then stages through host memory); dst.accept() makes dst's later work wait for it.
  // Neither waits on the host, so two devices keep working while the state travels.
  virtual void* send_to(Ops& dst, float* dst_ptr, const float* src, int64_t n) {
    (void)dst, (void)dst_ptr, (void)src, (void)n;
    return nullptr;
  }
  virtual void accept(void* token) { (void)token; }
  // The backend's GPU index, -1 for the CPU (peer-access decisions between shards).
  virtual int device_index() const { return -1; }

  // ---- a step's rows, and decode steps as captured graphs (engine/step_graphs.h)
  // begin_rows() hands the backend the step's rows (StepRows) and pool before its layers run;
  // the state ops and the position-dependent ops (RoPE, hash routing) read them from there (a
  // device backend uploads them into a device block, so that a captured step reads the values
  // of the step it is replayed for). end_rows() after the layers.
  virtual void begin_rows(const StatePool& pool, const StepRows& rows) = 0;
  virtual void end_rows() {}
  // The rows a decode step of n sequences is padded to so that one capture serves every step of
  // that row count (n where the backend has no graphs).
  virtual int64_t padded_rows(int64_t n) const { return n; }
  // Appends to `key` everything a capture of the current step bakes in besides its row count
  // and the HC state's address (the row block's address, the scratch layout, the capacities the
  // kernels' grids were sized by). false where the backend has no graphs (the CPU).
  virtual bool step_key(std::vector<uint64_t>& key) {
    (void)key;
    return false;
  }
  // Whether a step may be captured now (not while per-op profiling records events).
  virtual bool can_capture() const { return false; }
  // Capture: the ops queued between begin_capture() and end_capture() are recorded, not run.
  // end_capture() returns the executable (opaque to the engine); abort_capture() ends a capture
  // that failed part way. replay() queues a captured step.
  class Graph {
   public:
    virtual ~Graph() = default;
    virtual size_t nodes() const { return 0; }  // operations in the captured step
  };
  virtual void begin_capture() {}
  virtual std::unique_ptr<Graph> end_capture() { return nullptr; }
  virtual void abort_capture() {}
  virtual void replay(const Graph& g) { (void)g; }

  virtual void embed(const Mat& table, const int32_t* tokens, int64_t n, int hc, float* X) = 0;
  virtual void matmul(const Mat& W, const float* x, int64_t n, float* y) = 0;
  // y[i] = W[i] x for `count` matrices on the same input (the projections a sub-layer takes
  // from one x); a device backend may run them as one launch (the same values as matmul's where
  // that launch is the kernel matmul takes alone).
  virtual void matmuls(const Mat* const* W, float* const* y, int count, const float* x, int64_t n) {
    for (int i = 0; i < count; ++i) matmul(*W[i], x, n, y[i]);
  }
  // Grouped low-rank output: y[t, g*R + j] = W[g*R + j] . x[t, g*in : (g+1)*in]
  virtual void grouped_matmul(const Mat& W, int groups, const float* x, int64_t n, float* y) = 0;
  virtual void rmsnorm(const float* x, const std::vector<float>& w, int64_t rows, float eps, float* y) = 0;
  virtual void rmsnorm_unweighted(float* x, int64_t rows, int64_t d, float eps) = 0;
  virtual void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
                    int sign) = 0;
  virtual void copy(float* dst, const float* src, int64_t n) = 0;  // both backend memory
  virtual void scale(float* x, int64_t n, float s) = 0;
  virtual void add(float* y, const float* x, int64_t n) = 0;

  virtual void hc_pre(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* u, float* post,
                      float* comb) = 0;
  virtual void hc_post(const float* y, const float* post, const float* comb, int64_t n, const ModelConfig& c,
                       float* X) = 0;
  virtual void hc_head(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* h) = 0;
  // out[t * stride .. + D] = the mean of row t's hc streams (the DSpark drafter's taps).
  virtual void hc_stream_mean(const float* X, int64_t n, const ModelConfig& c, float* out, int64_t stride) = 0;

  // ---- state ops over the rows of begin_rows() (one call per layer whatever the batch).
  // The SWA KV rows kv [n, head_dim] into the pool (in its row form) where the sequence keeps
  // them (the rows of pages with an SWA block).
  virtual void kv_store(const StatePool& pool, int layer, const float* kv) = 0;
  // Feeds the compressor projections a/g [n, coff*d] (indexer: its own compressor, d =
  // index_head_dim) to every row's sequence: each window that closes at a row becomes an entry
  // (pooled, normed, RoPE'd at its first position, then stored in the pool's row form, which is
  // model numerics' round trip); the latest rows go to the slot for the windows still open.
  virtual void compressor_update(const StatePool& pool, int layer, bool indexer, const CompressorWeights& w,
                                 const float* a, const float* g, float eps, const RopeTable& rope, Numerics num) = 0;
  // For each row (position p): the top-min(k, visible) indexer keys by score (descending, ties
  // to the lower index) into sel [n, k] (int32, padded with -1), visible = (p + 1) / ratio.
  virtual void indexer_topk(const StatePool& pool, int layer, const float* q, const float* w, int ih, int64_t id,
                            int k, int32_t* sel) = 0;
  // Sparse attention with sink for every row: window rows (this step's kv_chunk [n, head_dim]
  // for the sequence's positions in this step, the pool's SWA rows before), plus compressed
  // entries when `compressed`: those of sel [n, k] (-1 = none), or every visible one when sel
  // is null.
  virtual void attention(const StatePool& pool, int layer, const float* q, const ModelConfig& c,
                         const float* kv_chunk, bool compressed, const int32_t* sel, int k,
                         const std::vector<float>& sinks, float* out) = 0;
  // Attention with sink of nq queries q [nq, heads, hd] (backend memory) over the same n_rows
  // K = V rows, no mask (the DSpark drafter's block: its context rows and the block's own);
  // rows [n_rows, hd] in host memory; out [nq, heads, hd] on the backend.
  virtual void attention_dense(const float* q, int64_t nq, int64_t heads, int64_t hd, const float* rows, int64_t n_rows,
                               const std::vector<float>& sinks, float scale, float* out) = 0;
  // The MoE of x [n, D] (the router reads x). Under model numerics the experts read x's FP8 round
  // trip: xq when given (made by the FFN norm's launch: rmsnorm_bf16_fp8), else the backend makes it.
  virtual void moe(const LayerWeights& w, const ModelConfig& c, const float* x, const float* xq, const int32_t* tokens,
                   int64_t n, Numerics num, float* y) = 0;

  // Model-numerics round trips (in place).
  virtual void round_bf16(float* x, int64_t n) = 0;
  // BF16 rounding points folded into the op beside them: in = round_bf16 on the op's input (in
  // place) first, out = round_bf16 on what it writes after. The defaults run exactly that
  // sequence; a device backend does it in the op's one launch (the same values).
  struct Bf16Round {
    bool in = false, out = false;
  };
  virtual void rmsnorm_bf16(float* x, const std::vector<float>& w, int64_t rows, float eps, float* y, Bf16Round r) {
    const int64_t d = static_cast<int64_t>(w.size());
    if (r.in) round_bf16(x, rows * d);
    rmsnorm(x, w, rows, eps, y);
    if (r.out) round_bf16(y, rows * d);
  }
  // rmsnorm_bf16, then act_quant_fp8_copy(yq, y) (yq may be y): the FP8 input of the linears that
  // read the normed rows, in the norm's own launch on a device backend.
  virtual void rmsnorm_bf16_fp8(float* x, const std::vector<float>& w, int64_t rows, float eps, float* y, float* yq,
                                Bf16Round r) {
    rmsnorm_bf16(x, w, rows, eps, y, r);
    act_quant_fp8_copy(yq, y, rows, static_cast<int64_t>(w.size()), false);
  }
  virtual void rmsnorm_unweighted_bf16(float* x, int64_t rows, int64_t d, float eps, Bf16Round r) {
    if (r.in) round_bf16(x, rows * d);
    rmsnorm_unweighted(x, rows, d, eps);
    if (r.out) round_bf16(x, rows * d);
  }
  virtual void rope_bf16(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
                         int sign, Bf16Round r) {
    if (r.in) round_bf16(x, n * heads * head_dim);
    rope(x, n, heads, head_dim, t, pos, sign);
    if (r.out) round_bf16(x, n * heads * head_dim);
  }
  // Per-head rmsnorm (weights w [head_dim], or none when w is null; norm_r), then RoPE forward
  // (rope_r), in place on x [n, heads, head_dim]: the query's and the KV row's norm + RoPE, in one
  // launch on a device backend.
  virtual void rmsnorm_rope_bf16(float* x, const std::vector<float>* w, int64_t n, int64_t heads, int64_t head_dim,
                                 float eps, const RopeTable& t, const int64_t* pos, Bf16Round norm_r,
                                 Bf16Round rope_r) {
    if (w) rmsnorm_bf16(x, *w, n * heads, eps, x, norm_r);
    else rmsnorm_unweighted_bf16(x, n * heads, head_dim, eps, norm_r);
    rope_bf16(x, n, heads, head_dim, t, pos, +1, rope_r);
  }
  virtual void scale_bf16(float* x, int64_t n, float s, Bf16Round r) {
    if (r.in) round_bf16(x, n);
    scale(x, n, s);
    if (r.out) round_bf16(x, n);
  }
  virtual void hc_post_bf16(const float* y, const float* post, const float* comb, int64_t n, const ModelConfig& c,
                            float* X) {  // X rounded after
    hc_post(y, post, comb, n, c, X);
    round_bf16(X, n * c.hc_mult * c.dim);
  }
  // The hand-over between sub-layers: hc_post of the finished one (its y, post_in, comb_in; X
  // rounded to BF16 after when post_round: hc_post_bf16), then hc_pre of the next (next.w) into
  // next.u / post / comb (which may be post_in / comb_in) and that sub-layer's input norm of u:
  // rmsnorm_bf16_fp8 into xn and xq when xq, else rmsnorm_bf16 into xn (rounding next.r, eps
  // c.norm_eps). The default runs that sequence; a device backend may do it in one launch (the
  // same values).
  struct HcNext {
    const HcWeights* w = nullptr;
    const std::vector<float>* norm = nullptr;
    float *u = nullptr, *post = nullptr, *comb = nullptr, *xn = nullptr, *xq = nullptr;
    Bf16Round r;
  };
  virtual void hc_post_pre(const float* y, const float* post_in, const float* comb_in, bool post_round, int64_t n,
                           const ModelConfig& c, float* X, const HcNext& next) {
    if (post_round) hc_post_bf16(y, post_in, comb_in, n, c, X);
    else hc_post(y, post_in, comb_in, n, c, X);
    hc_pre(*next.w, c, X, n, next.u, next.post, next.comb);
    if (next.xq) rmsnorm_bf16_fp8(next.u, *next.norm, n, c.norm_eps, next.xn, next.xq, next.r);
    else rmsnorm_bf16(next.u, *next.norm, n, c.norm_eps, next.xn, next.r);
  }
  // FP8 e4m3 activation quantisation of a linear's input, 1x128 blocks with ue8m0 scales.
  virtual void act_quant_fp8(float* x, int64_t rows, int64_t cols) = 0;
  // The same into dst (which may be src), with src rounded to BF16 first when round_in (as
  // round_bf16 on it would; src is left as is unless it is dst). The default: copy, round, quantise.
  virtual void act_quant_fp8_copy(float* dst, const float* src, int64_t rows, int64_t cols, bool round_in) {
    if (dst != src) copy(dst, src, rows * cols);
    if (round_in) round_bf16(dst, rows * cols);
    act_quant_fp8(dst, rows, cols);
  }
  // FP8 simulation (64-blocks) of the non-RoPE channels of KV rows, then BF16.
  virtual void kv_fp8_sim(float* x, int64_t rows, int64_t head_dim, int64_t channels) = 0;
  // Hadamard rotation then FP4 simulation (32-blocks) of indexer q/k rows, then BF16.
  virtual void indexer_fp4_sim(float* x, int64_t rows, int64_t d) = 0;
};

}  // namespace hs
