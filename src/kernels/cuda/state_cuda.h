// Kernels over the per-sequence state kept on the device (the engine's CUDA backend keeps each
// layer's SWA ring, compressor windows and compressed entries in GPU memory): the compressor's
// window bookkeeping and the attention row lists. Their CPU twins are the loops of
// engine/cpu_ops.cpp (compressor_update, attention); tests/test_backend_ops_state.cpp checks
// them through the whole-model parity tests and directly.
#pragma once
#include <cstdint>

#include "kernels/cuda/device_context.h"

namespace hs::cuda {

// One compressor's open window on the device (ds4-model-spec.md §3.3).
struct CompressorBuffers {
  const float* buf_kv = nullptr;    // [ratio, coff*d]: the rows of the open window
  const float* buf_gate = nullptr;  // [ratio, coff*d] (gate without ape)
  const float* prev_kv = nullptr;   // [ratio, d]: first half of the last closed window (CSA)
  const float* prev_gate = nullptr; // [ratio, d] (ape included)
  int ratio = 0, coff = 1;
  int64_t d = 0;
};

// The pooling inputs of the nw windows that close when the n rows a/g [n, coff*d] follow the
// buf_n rows already buffered: kv_out/gate_out [nw, slots, d], slots = coff*ratio, gate + ape,
// absent slots (CSA's first window without a previous one) kv 0 / gate -inf. For CSA (coff 2)
// prev_out [2, ratio, d] receives the overlap half (kv, then gate + ape) of the last window.
// Reads the state, writes only the outputs (the caller then updates the state).
void compressor_gather(DeviceContext& ctx, const CompressorBuffers& st, int buf_n, bool has_prev, const float* a,
                       const float* g, int64_t n, const float* ape, int64_t nw, float* kv_out, float* gate_out,
                       float* prev_out);

// Attention row lists (AttnRows, three pools: 0 = this chunk's kv rows, 1 = the ring [window]
// with position s at slot s % window, 2 = the compressed entries) for n queries at positions
// p0 + t: the window rows max(0, p - window + 1) .. p, then the compressed entries: those of
// sel [n, k] (>= 0; -1 padding only at the end of a row) or, when sel is null and ratio > 0,
// every visible one, min(n_entries, (p + 1) / ratio). rows [n, rows_ld], n_rows [n].
// With pos (device int64, non-null) the queries' first position is read from pos[0] at run
// time instead of p0 (a captured decode step); rows_ld must then hold any position's rows
// (window + k, or window + n_entries without sel), and n_entries may be a capacity: only
// (p + 1) / ratio entries are visible.
void attention_rows(DeviceContext& ctx, int64_t n, int64_t p0, int window, int ratio, int64_t n_entries,
                    const int32_t* sel, int k, int32_t* rows, int32_t* n_rows, int64_t rows_ld,
                    const int64_t* pos = nullptr);
// The rows_ld attention_rows needs.
int64_t attention_rows_ld(int64_t n, int64_t p0, int window, int ratio, int64_t n_entries, bool has_sel, int k);

// A decode step's row stores at a position read at run time (pos: device int64, pos[0]):
// dst[slot * width .. + width) = src[0 .. width) with slot = ((pos[0] + add) / div) % mod, for
// one or two (dst, src) pairs (dst1/src1 may be null). The SWA ring (add 0, div 1, mod window),
// a compressor's open window (mod ratio) and a new compressed entry (add 1 - ratio, div ratio).
void store_row_at(DeviceContext& ctx, float* dst0, const float* src0, float* dst1, const float* src1, int64_t width,
                  const int64_t* pos, int64_t add, int64_t div, int64_t mod);

}  // namespace hs::cuda
