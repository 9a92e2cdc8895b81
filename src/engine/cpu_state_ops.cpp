// The CPU reference of the state ops (ops.h): plain loops over a step's rows reading and
// writing the shard's state pool in host memory. These are the twins of the CUDA state
// kernels (kernels/cuda/paged_state.cu); the math is that of ds4-model-spec.md §5.3-5.6.
#include <sys/sysinfo.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/cpu_ops.h"
#include "kernels/cpu/ops.h"
#include "util/error.h"

namespace hs {

namespace {

class HostMemory : public Ops::StateMemory {
 public:
  explicit HostMemory(size_t bytes) : p_(new uint8_t[std::max<size_t>(bytes, 1)]) {}  // not touched: paged in on use
  void* data() const override { return p_.get(); }

 private:
  std::unique_ptr<uint8_t[]> p_;
};

// Block of page j in `table` (a slot's row of a pool table), checked.
int32_t block_of(const int32_t* table, int64_t j, const char* what, int64_t pos) {
  const int32_t b = table[j];
  HS_CHECK(b >= 0, "internal: ", what, " of position ", pos, " has no page");
  return b;
}

// Rows [first, first + count) of a sequence's paged rows as f32 pointers: into the pool for
// the F32 form, else decoded into `buf`.
void paged_rows(const PagedRows& rows, const int32_t* table, int64_t per_page, int64_t first, int64_t count,
                const char* what, std::vector<float>& buf, std::vector<const float*>& out) {
  out.resize(static_cast<size_t>(std::max<int64_t>(count, 0)));
  if (count <= 0) return;
  const bool f32 = rows.fmt.form == RowForm::F32;
  if (!f32) buf.resize(static_cast<size_t>(count * rows.fmt.d));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t e = first + i;
    const uint8_t* r = rows.row(block_of(table, e / per_page, what, e), e % per_page);
    if (f32) {
      out[static_cast<size_t>(i)] = reinterpret_cast<const float*>(r);
    } else {
      float* dst = buf.data() + i * rows.fmt.d;
      cpu::decode_row(rows.fmt, r, dst);
      out[static_cast<size_t>(i)] = dst;
    }
  }
}

}  // namespace

std::unique_ptr<Ops::StateMemory> CpuOps::alloc_state(size_t bytes) { return std::make_unique<HostMemory>(bytes); }

void CpuOps::state_copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

int64_t CpuOps::state_memory_hint() const {
  struct sysinfo si {};
  const int64_t ram = sysinfo(&si) == 0 ? static_cast<int64_t>(si.totalram) * si.mem_unit : int64_t{8} << 30;
  return ram / 4;
}

void CpuOps::begin_rows(const StatePool& pool, const StepRows& r) {
  (void)pool;
  pos_.assign(r.pos, r.pos + r.n);
  slot_.assign(r.slot, r.slot + r.n);
  seqs_.clear();
  for (int64_t i = 0; i < r.n;) {
    if (r.slot[i] < 0) {
      ++i;
      continue;
    }
    const int64_t e = r.row_end[i];
    HS_CHECK(r.row0[i] == i && e > i && e <= r.n, "internal: step rows of a sequence are not one run");
    seqs_.push_back({r.slot[i], i, e - i, r.pos[i]});
    i = e;
  }
}

void CpuOps::kv_store(const StatePool& pool, int layer, const float* kv) {
  const StateLayout& L = pool.layout();
  const PagedRows& rows = pool.storage(layer).kv;
  for (const Seq& s : seqs_) {
    const int32_t* table = pool.swa_table() + s.slot * L.max_pages;
    for (int64_t t = 0; t < s.n; ++t) {
      const int64_t p = s.p0 + t;
      const int32_t b = table[p / L.page];
      if (b >= 0) cpu::encode_row(rows.fmt, kv + (s.row0 + t) * rows.fmt.d, rows.row(b, p % L.page));
    }
  }
}

void CpuOps::compressor_update(const StatePool& pool, int layer, bool indexer, const CompressorWeights& w,
                               const float* a, const float* g, float eps, const RopeTable& rope, Numerics num) {
  const StateLayout& L = pool.layout();
  const StateLayout::Layer& y = L.layers[static_cast<size_t>(layer)];
  const LayerStorage& st = pool.storage(layer);
  const PagedRows& dst = indexer ? st.keys : st.entries;
  const int r = y.ratio, co = indexer ? 2 : y.coff, S = y.ring;
  const int64_t d = dst.fmt.d, width = co * d;
  float* ring_kv = indexer ? st.iring_kv : st.ring_kv;
  float* ring_gate = indexer ? st.iring_gate : st.ring_gate;
  const bool model = num == Numerics::Model;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> kv(static_cast<size_t>(2 * r * d)), gate(kv.size()), z(static_cast<size_t>(d));
  for (const Seq& s : seqs_) {
    float* rk = ring_kv + static_cast<int64_t>(s.slot) * S * width;
    float* rg = ring_gate + static_cast<int64_t>(s.slot) * S * width;
    // Raw projection row of position q: this step's rows from a/g, earlier ones from the slot.
    auto a_row = [&](int64_t q) { return q >= s.p0 ? a + (s.row0 + q - s.p0) * width : rk + (q % S) * width; };
    auto g_row = [&](int64_t q) { return q >= s.p0 ? g + (s.row0 + q - s.p0) * width : rg + (q % S) * width; };
    const int32_t* table = pool.cmp_table() + s.slot * L.max_pages;
    for (int64_t t = 0; t < s.n; ++t) {
      const int64_t p = s.p0 + t;
      if ((p + 1) % r != 0) continue;
      const int64_t i = (p + 1) / r - 1, first = i * r;  // entry i pools the window [i r, i r + r)
      int slots = r;
      if (co == 2) {  // overlapping CSA: the previous window's first half, then this window's second half
        for (int sl = 0; sl < r; ++sl) {
          const float* pa = i > 0 ? a_row(first - r + sl) : nullptr;
          const float* pg = i > 0 ? g_row(first - r + sl) : nullptr;
          for (int64_t ch = 0; ch < d; ++ch) {
            kv[sl * d + ch] = pa ? pa[ch] : 0.0f;
            gate[sl * d + ch] = pg ? pg[ch] + w.ape[sl * width + ch] : kNegInf;
          }
        }
        for (int sl = 0; sl < r; ++sl) {
          const float* pa = a_row(first + sl);
          const float* pg = g_row(first + sl);
          for (int64_t ch = 0; ch < d; ++ch) {
            kv[(r + sl) * d + ch] = pa[d + ch];
            gate[(r + sl) * d + ch] = pg[d + ch] + w.ape[sl * width + d + ch];
          }
        }
        slots = 2 * r;
      } else {
        for (int sl = 0; sl < r; ++sl) {
          const float* pa = a_row(first + sl);
          const float* pg = g_row(first + sl);
          for (int64_t ch = 0; ch < d; ++ch) {
            kv[sl * d + ch] = pa[ch];
            gate[sl * d + ch] = pg[ch] + w.ape[sl * d + ch];
          }
        }
      }
      cpu::compress_pool(kv.data(), gate.data(), slots, d, z.data());
      if (model) cpu::round_bf16(z.data(), d);
      cpu::rmsnorm(z.data(), w.norm.data(), 1, d, eps, z.data());
      if (model) cpu::round_bf16(z.data(), d);
      cpu::rope(z.data(), 1, 1, d, rope.rope_dim, &first, rope.inv_freq.data(), +1);
      // The row form applies model numerics' round trip (FP8 KV / Hadamard + FP4) as it stores.
      const int32_t b = block_of(table, first / L.page, "a compressed entry", first);
      cpu::encode_row(dst.fmt, z.data(), dst.row(b, i % dst.rows_per_block));
    }
    // The latest rows stay in the slot (later windows read them; a rollback too).
    for (int64_t t = std::max<int64_t>(0, s.n - S); t < s.n; ++t) {
      const int64_t q = s.p0 + t;
      std::memcpy(rk + (q % S) * width, a + (s.row0 + t) * width, static_cast<size_t>(width) * 4);
      std::memcpy(rg + (q % S) * width, g + (s.row0 + t) * width, static_cast<size_t>(width) * 4);
    }
  }
}

void CpuOps::indexer_topk(const StatePool& pool, int layer, const float* q, const float* w, int ih, int64_t id, int k,
                          int32_t* sel) {
  const StateLayout& L = pool.layout();
  const int r = L.layers[static_cast<size_t>(layer)].ratio;
  const PagedRows& keys = pool.storage(layer).keys;
  std::fill(sel, sel + static_cast<int64_t>(slot_.size()) * k, -1);
  std::vector<float> buf;
  std::vector<const float*> rows;
  std::vector<float> contiguous;
  for (const Seq& s : seqs_) {
    const int64_t visible_max = (s.p0 + s.n) / r;
    paged_rows(keys, pool.cmp_table() + s.slot * L.max_pages, keys.rows_per_block, 0, visible_max, "an indexer key",
               buf, rows);
    contiguous.resize(static_cast<size_t>(visible_max * id));
    for (int64_t e = 0; e < visible_max; ++e)
      std::memcpy(contiguous.data() + e * id, rows[static_cast<size_t>(e)], static_cast<size_t>(id) * 4);
    pool_.parallel_for(s.n, 1, [&](int64_t b, int64_t e) {
      std::vector<float> score(static_cast<size_t>(visible_max));
      for (int64_t t = b; t < e; ++t) {
        const int64_t row = s.row0 + t;
        const int64_t visible = (s.p0 + t + 1) / r;
        cpu::indexer_scores(q + row * ih * id, w + row * ih, ih, id, contiguous.data(), visible, score.data());
        const std::vector<int32_t> top = cpu::topk_indices(score.data(), visible, k);
        for (size_t j = 0; j < top.size(); ++j) sel[row * k + static_cast<int64_t>(j)] = top[j];
      }
    });
  }
}

void CpuOps::attention(const StatePool& pool, int layer, const float* q, const ModelConfig& c, const float* kv_chunk,
                       bool compressed, const int32_t* sel, int k, const std::vector<float>& sinks, float* out) {
  const StateLayout& L = pool.layout();
  const int r = L.layers[static_cast<size_t>(layer)].ratio;
  const LayerStorage& st = pool.storage(layer);
  const int64_t hd = c.head_dim, W = c.window, H = c.n_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Padding rows attend to nothing: their output is zero.
  for (size_t i = 0; i < slot_.size(); ++i)
    if (slot_[i] < 0) std::fill(out + static_cast<int64_t>(i) * H * hd, out + (static_cast<int64_t>(i) + 1) * H * hd, 0.0f);
  std::vector<float> old_buf, ent_buf;
  std::vector<const float*> old_rows, ent_rows;
  for (const Seq& s : seqs_) {
    // The SWA rows before this step that its first query reads, and every visible entry.
    const int64_t old_first = std::max<int64_t>(0, s.p0 - W + 1);
    paged_rows(st.kv, pool.swa_table() + s.slot * L.max_pages, L.page, old_first, s.p0 - old_first, "an SWA row",
               old_buf, old_rows);
    const int64_t ents = compressed ? (s.p0 + s.n) / r : 0;
    if (compressed)
      paged_rows(st.entries, pool.cmp_table() + s.slot * L.max_pages, st.entries.rows_per_block, 0, ents,
                 "a compressed entry", ent_buf, ent_rows);
    pool_.parallel_for(s.n, 1, [&](int64_t b, int64_t e) {
      std::vector<const float*> rows;
      for (int64_t t = b; t < e; ++t) {
        const int64_t p = s.p0 + t, row = s.row0 + t;
        rows.clear();
        for (int64_t sp = std::max<int64_t>(0, p - W + 1); sp <= p; ++sp)
          rows.push_back(sp >= s.p0 ? kv_chunk + (s.row0 + sp - s.p0) * hd : old_rows[static_cast<size_t>(sp - old_first)]);
        if (compressed) {
          const int64_t visible = (p + 1) / r;
          if (!sel) {
            for (int64_t i = 0; i < visible; ++i) rows.push_back(ent_rows[static_cast<size_t>(i)]);
          } else {
            for (int j = 0; j < k; ++j) {
              const int32_t i = sel[row * k + j];
              if (i < 0) continue;
              HS_CHECK(i < visible, "internal: indexer chose entry ", i, " of ", visible, " visible");
              rows.push_back(ent_rows[static_cast<size_t>(i)]);
            }
          }
        }
        cpu::attention_sink(q + row * H * hd, H, hd, rows.data(), static_cast<int64_t>(rows.size()), sinks.data(), scale,
                            out + row * H * hd);
      }
    });
  }
}

void CpuOps::attention_dense(const float* q, int64_t nq, int64_t heads, int64_t hd, const float* rows, int64_t n_rows,
                             const std::vector<float>& sinks, float scale, float* out) {
  std::vector<const float*> r(static_cast<size_t>(n_rows));
  for (int64_t j = 0; j < n_rows; ++j) r[static_cast<size_t>(j)] = rows + j * hd;
  pool_.parallel_for(nq, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      cpu::attention_sink(q + t * heads * hd, heads, hd, r.data(), n_rows, sinks.data(), scale, out + t * heads * hd);
  });
}

}  // namespace hs
