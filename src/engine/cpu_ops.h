// The CPU reference backend of the op interface (kernels/cpu, with a thread pool).
#pragma once
#include <memory>

#include "engine/ops.h"
#include "util/thread_pool.h"

namespace hs {

class CpuOps : public Ops {
 public:
  explicit CpuOps(ThreadPool& pool) : pool_(pool) {}
  const char* name() const override { return "cpu"; }
  float* alloc(int64_t n) override;
  size_t mark() const override { return scratch_.size(); }
  void release_to(size_t m) override { scratch_.resize(m); }
  void upload(float* dst, const float* host, int64_t n) override;
  void download(float* host, const float* src, int64_t n) override;

  void embed(const Mat& table, const int32_t* tokens, int64_t n, int hc, float* X) override;
  void matmul(const Mat& W, const float* x, int64_t n, float* y) override;
  void grouped_matmul(const Mat& W, int groups, const float* x, int64_t n, float* y) override;
  void rmsnorm(const float* x, const std::vector<float>& w, int64_t rows, float eps, float* y) override;
  void rmsnorm_unweighted(float* x, int64_t rows, int64_t d, float eps) override;
  void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
            int sign) override;
  void copy(float* dst, const float* src, int64_t n) override { upload(dst, src, n); }
  void scale(float* x, int64_t n, float s) override;
  void add(float* y, const float* x, int64_t n) override;
  void hc_pre(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* u, float* post,
              float* comb) override;
  void hc_post(const float* y, const float* post, const float* comb, int64_t n, const ModelConfig& c,
               float* X) override;
  void hc_head(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* h) override;
  void hc_stream_mean(const float* X, int64_t n, const ModelConfig& c, float* out, int64_t stride) override;
  std::unique_ptr<StateMemory> alloc_state(size_t bytes) override;
  void state_copy(void* dst, const void* src, size_t bytes) override;
  void state_upload(void* dst, const void* host, size_t bytes) override { state_copy(dst, host, bytes); }
  int64_t state_memory_hint() const override;
  void begin_rows(const StatePool& pool, const StepRows& rows) override;
  void kv_store(const StatePool& pool, int layer, const float* kv) override;
  void compressor_update(const StatePool& pool, int layer, bool indexer, const CompressorWeights& w, const float* a,
                         const float* g, float eps, const RopeTable& rope, Numerics num) override;
  void indexer_topk(const StatePool& pool, int layer, const float* q, const float* w, int ih, int64_t id, int k,
                    int32_t* sel) override;
  void attention(const StatePool& pool, int layer, const float* q, const ModelConfig& c, const float* kv_chunk,
                 bool compressed, const int32_t* sel, int k, const std::vector<float>& sinks, float* out) override;
  void attention_dense(const float* q, int64_t nq, int64_t heads, int64_t hd, const float* rows, int64_t n_rows,
                       const std::vector<float>& sinks, float scale, float* out) override;
  void moe(const LayerWeights& w, const ModelConfig& c, const float* x, const float* xq, const int32_t* tokens, int64_t n,
           Numerics num, float* y) override;
  void round_bf16(float* x, int64_t n) override;
  void act_quant_fp8(float* x, int64_t rows, int64_t cols) override;
  void kv_fp8_sim(float* x, int64_t rows, int64_t head_dim, int64_t channels) override;
  void indexer_fp4_sim(float* x, int64_t rows, int64_t d) override;

 private:
  // The current step's rows (begin_rows), grouped by sequence.
  struct Seq {
    int slot;
    int64_t row0, n, p0;
  };
  ThreadPool& pool_;
  std::vector<std::unique_ptr<float[]>> scratch_;
  std::vector<int64_t> pos_;
  std::vector<int32_t> slot_;
  std::vector<Seq> seqs_;
};

}  // namespace hs
