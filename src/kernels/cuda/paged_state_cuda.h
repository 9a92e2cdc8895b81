// The state ops' kernels over a shard's paged state pool (engine/state_pool.h): one launch per
// op and layer for all the rows of a step, whatever sequences they belong to. Every kernel
// reads each row's position, sequence slot and run of rows from a device row block (StepRows)
// and the slot's page tables, so a captured decode step serves any set of sequences.
// CPU twins: the state ops of engine/cpu_state_ops.cpp (tests/test_backend_ops_state.cpp).
#pragma once
#include <cstdint>

#include "kernels/cuda/device_context.h"
#include "kernels/state_rows.h"

namespace hs::cuda {

// A step's rows on the device (int64 positions; int32 slots, -1 for padding; int32 first and
// one-past-last row of the row's sequence in the step).
struct DevRows {
  const int64_t* pos = nullptr;
  const int32_t* slot = nullptr;
  const int32_t* row0 = nullptr;
  const int32_t* row_end = nullptr;
  int64_t n = 0;
};

// The pool's page tables [slots, max_pages]: compressed blocks and SWA blocks (-1: none).
struct PageTables {
  const int32_t* cmp = nullptr;
  const int32_t* swa = nullptr;
  int64_t max_pages = 0;
  int32_t page = 0;
};

// Each row's SWA KV row x [n, kv.fmt.d] into its page (rows of pages without an SWA block are
// not kept), in the pool's row form (any form: the tests store FP4 rows through it too).
void kv_store_paged(DeviceContext& ctx, const DevRows& rows, const PageTables& t, const PagedRows& kv, const float* x);

struct CompressorPaged {
  PagedRows dst;                 // the entries (or the indexer keys)
  float* ring_kv = nullptr;      // [slots, ring, coff * d]: raw rows of the latest positions
  float* ring_gate = nullptr;
  int32_t ring = 0, ratio = 0, coff = 1, rope_dim = 0;
  const float* ape = nullptr;    // [ratio, coff * d]
  const float* norm = nullptr;   // [d]
  const float* inv_freq = nullptr;
  float eps = 0.0f;
  bool model = false;            // model numerics: BF16 around the norm (the row form does the rest)
};
// The compressor step for every row: a row at which a window closes ((p + 1) % ratio == 0)
// pools it from this step's a/g [n, coff * d] and the ring, norms it, RoPEs it at its first
// position and stores it in its page; then the latest `ring` rows of each sequence go to its
// ring (decode: every row).
void compressor_paged(DeviceContext& ctx, const DevRows& rows, const PageTables& t, const CompressorPaged& c,
                      const float* a, const float* g, bool decode);

// Attention row lists for every row (AttnRows pools: 0 = this step's kv rows, 1 = the SWA
// pages, 2 = the compressed entries): the window rows, then the compressed entries of sel
// [n, k] or (sel null, ratio > 0) every visible one. rows [n, ld], n_rows [n]; padding rows
// get none.
void attention_rows_paged(DeviceContext& ctx, const DevRows& r, const PageTables& t, int window, int ratio,
                          int32_t entries_per_page, const int32_t* sel, int k, int32_t* rows, int32_t* n_rows,
                          int64_t ld);

}  // namespace hs::cuda
