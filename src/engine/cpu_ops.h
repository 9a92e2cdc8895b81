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
  void compressor_update(CompressorState& st, const CompressorWeights& w, const float* a, const float* g, int64_t n,
                         float eps, const RopeTable& rope, Numerics num, EntryQat qat) override;
  void indexer_topk(const float* q, const float* w, int64_t n, int ih, int64_t id, const CompressorState& keys,
                    int64_t p0, int ratio, int k, int32_t* sel) override;
  void attention(const float* q, int64_t n, const ModelConfig& c, const LayerState& st, const float* kv_chunk,
                 int64_t p0, const CompressorState* comp, const int32_t* sel, int k,
                 const std::vector<float>& sinks, float* out) override;
  void ring_store(LayerState& st, const float* kv_chunk, int64_t n, int64_t p0, int window,
                  int64_t head_dim) override;
  void moe(const LayerWeights& w, const ModelConfig& c, const float* x, const int32_t* tokens, int64_t n,
           Numerics num, float* y) override;
  void round_bf16(float* x, int64_t n) override;
  void act_quant_fp8(float* x, int64_t rows, int64_t cols) override;
  void kv_fp8_sim(float* x, int64_t rows, int64_t head_dim, int64_t channels) override;
  void indexer_fp4_sim(float* x, int64_t rows, int64_t d) override;

 private:
  ThreadPool& pool_;
  std::vector<std::unique_ptr<float[]>> scratch_;
};

}  // namespace hs
