// A shard's state pool (docs/architecture.md, "State pool"): every sequence's state on the
// shard lives in one allocation per layer and kind on the shard's backend, as pages of P
// positions (P = 128 for V4-Flash and Pro: the SWA window, the HCA ratio, a multiple of the
// CSA ratio; layout() derives it for other shapes).
//
//   compressed page   per layer: the P/r compressed entries of its positions (and the CSA
//                     layers' indexer keys). Needed for as long as the sequence lives.
//   SWA page          per layer: the P KV rows of its positions. A query reads only the last
//                     `window` rows, so a sequence holds an SWA page only while it may still be
//                     read: positions >= high - window + 1 - max_rollback (high: the furthest
//                     the sequence got).
//   slot              per layer and compressor: the raw projections of the latest
//                     coff * ratio + max_rollback positions (the open window, the CSA overlap
//                     half, and what a rollback needs), position p at row p % rows.
//
// A SequenceState is a handle: its slot, n_past and two page tables. Every compressor count
// follows from n_past (entries = n_past / ratio; the open window holds n_past % ratio rows).
// Full pages never change again, so fork() shares them by reference (counted); only a
// partial last page and the slot are copied. Blocks are handed out uninitialised: nothing is
// ever read that the sequence did not write (visibility follows from positions).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/state_rows.h"
#include "model/config.h"
#include "util/error.h"

namespace hs {

class Ops;
class StatePool;

// A step that needs more pages than the pool has free (nothing was changed): the scheduler
// preempts a sequence and retries; other callers see an ordinary error.
class StatePoolFull : public Error {
 public:
  using Error::Error;
};

struct StatePoolOptions {
  int slots = 32;               // sequences that can be live at once on the shard
  int64_t max_context = 0;      // longest sequence, in positions; 0: the model's max_position
  int64_t memory_bytes = 0;     // for the whole pool; 0: the backend's suggestion (Ops::state_memory_hint),
                                // -k: that suggestion shared by k pools on one backend
  int max_rollback = 16;        // tokens truncate() may take back (speculative decoding)
  bool packed = false;          // rows in model numerics' FP8 / FP4 forms (else F32)
};

// The pool's shape, all derived from the config and the options.
struct StateLayout {
  int page = 0;          // positions per page
  int window = 0;
  int max_rollback = 0;
  int slots = 0;
  int64_t max_context = 0;
  int64_t max_pages = 0;  // per sequence: ceil(max_context / page)
  int64_t cmp_blocks = 0, swa_blocks = 0;
  struct Layer {
    int ratio = 0, coff = 1;
    int ring = 0;  // slot rows per compressor (0: no compressor)
    RowFormat kv, entry, key;  // key.d == 0: no indexer
  };
  std::vector<Layer> layers;
  // Bytes of one page (one block of each kind over all the shard's layers) and of one slot.
  int64_t cmp_page_bytes = 0, swa_page_bytes = 0, slot_bytes = 0;
  // State bytes a sequence of n tokens holds (compressed pages, the SWA pages it keeps, a slot).
  int64_t sequence_bytes(int64_t n_tokens) const;
  // SWA pages one sequence may hold at once.
  int64_t swa_pages_per_sequence() const;
  static int page_size(const ModelConfig& c);
};

// Layout of a shard [layer_begin, layer_end) with the pool's budget split into blocks.
StateLayout make_state_layout(const ModelConfig& c, int layer_begin, int layer_end, const StatePoolOptions& o,
                              int64_t memory_bytes);
// The whole model's state per sequence in one numerics (packed: model numerics' forms).
StateLayout model_state_layout(const ModelConfig& c, bool packed, int max_rollback = 16);
// What one sequence's state takes for this model, both numerics: bytes per token of context,
// the SWA pages and slot it keeps besides, and the totals at 4K, 128K and 1M tokens (inspect, bench).
std::string describe_state_memory(const ModelConfig& c);

// A sequence's state at n_past = n, held apart from any sequence (the prefix cache keeps
// these; StatePool::snapshot / restore). Its full compressed pages are shared by reference
// (they never change again); what a restore needs besides them is copied to host memory, so a
// snapshot holds no SWA page and no slot: the last compressed page when partial, the SWA rows
// of the window before n, and the open compressor windows' raw rows.
struct PoolSnapshot {
  int64_t n = 0;
  std::vector<int32_t> pages;     // compressed blocks of pages 0 .. n / P - 1 (a reference held on each)
  std::vector<uint8_t> partial;   // page n / P's compressed rows, every layer (when n % P != 0)
  std::vector<uint8_t> swa_rows;  // rows [max(0, n - window + 1), n) of every layer
  std::vector<float> ring;        // every compressor's raw rows [ring_first, n), kv then gate per row
  int64_t host_bytes() const { return static_cast<int64_t>(partial.size() + swa_rows.size() + ring.size() * 4); }
};

class SequenceState {
 public:
  ~SequenceState();
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  int64_t n_past() const { return n_past_; }
  int slot() const { return slot_; }
  int layer_begin() const;
  int n_layers() const;
  const StatePool& pool() const { return *pool_; }
  StatePool& pool() { return *pool_; }
  // Drops every page (the slot stays): the sequence starts again at position 0.
  void reset();
  // Bytes of the pool this sequence holds (shared pages counted in full).
  int64_t bytes() const;
  // Page j's compressed and SWA blocks (-1: none).
  const std::vector<int32_t>& cmp_pages() const { return cmp_; }
  const std::vector<int32_t>& swa_pages() const { return swa_; }
  int64_t high() const { return high_; }
  // The earliest position fork() and truncate() may go back to (0, or where a restore started it).
  int64_t floor() const { return floor_; }

 private:
  friend class StatePool;
  SequenceState(StatePool* p, int slot) : pool_(p), slot_(slot) {}
  StatePool* pool_;
  int slot_;
  int64_t n_past_ = 0;
  int64_t high_ = 0;           // the furthest n_past since the last reset (what the slot and SWA pages hold)
  int64_t floor_ = 0;          // no rows before this are held for a rollback (a restored sequence)
  std::vector<int32_t> cmp_;   // [pages]
  std::vector<int32_t> swa_;   // [pages], -1 once released
};

// Storage of the pool on its backend, per layer (the op interface reads these).
struct LayerStorage {
  PagedRows kv;                            // SWA rows, rows_per_block = page
  PagedRows entries, keys;                 // compressed rows, rows_per_block = page / ratio
  float* ring_kv = nullptr;                // [slots, ring, coff * d]
  float* ring_gate = nullptr;
  float* iring_kv = nullptr;               // indexer compressor [slots, ring, 2 * key.d]
  float* iring_gate = nullptr;
};

struct StatePoolStats {
  int64_t cmp_total = 0, cmp_used = 0, cmp_shared = 0;  // compressed pages (shared: held by > 1)
  int64_t swa_total = 0, swa_used = 0;
  int slots_total = 0, slots_used = 0;
};

class StatePool {
 public:
  StatePool(const ModelConfig& c, int layer_begin, int layer_end, Ops& ops, const StatePoolOptions& o);
  ~StatePool();
  StatePool(const StatePool&) = delete;
  StatePool& operator=(const StatePool&) = delete;

  const StateLayout& layout() const { return lay_; }
  int layer_begin() const { return begin_; }
  int n_layers() const { return static_cast<int>(lay_.layers.size()); }
  const LayerStorage& storage(int layer_index) const { return store_[static_cast<size_t>(layer_index)]; }
  // Device (backend) page tables [slots, max_pages] int32, written by sync_tables().
  const int32_t* cmp_table() const;
  const int32_t* swa_table() const;

  // A new empty sequence on a free slot; throws when every slot is taken.
  std::unique_ptr<SequenceState> acquire();
  // Blocks for n more tokens (n_past .. n_past + n - 1): the compressed pages they reach and
  // the SWA pages their rows are kept in. false, changing nothing, when the pool lacks them or
  // the sequence would pass max_context.
  bool reserve(SequenceState& s, int64_t n);
  // What reserve(s, n) would take: {compressed pages, SWA pages}.
  std::pair<int64_t, int64_t> blocks_needed(const SequenceState& s, int64_t n) const;
  // After a step over n reserved tokens: n_past += n; SWA pages no query will read again go back.
  void advance(SequenceState& s, int64_t n);
  // dst (empty, of this pool) = src's first `upto` tokens: full pages shared, the partial page
  // and the slot copied. upto must be >= src.high() - max_rollback. Throws, changing nothing,
  // when that does not hold or the pool lacks the blocks.
  void fork(const SequenceState& src, int64_t upto, SequenceState& dst);
  // Rolls s back to n_past = n (n >= s.high() - max_rollback): pages past it go back, a shared
  // page that becomes partial is copied first. Throws, changing nothing, when that cannot be.
  void truncate(SequenceState& s, int64_t n);
  void release_pages(SequenceState& s);
  // At most cmp compressed and swa SWA pages from now on (an empty pool only; the blocks past
  // them stay allocated, unused): the ranks of a pipeline budget by the smallest rank's pool.
  void limit(int64_t cmp, int64_t swa);

  // ---- snapshots (prefix cache; engine/state_snapshot.cpp)
  // s's state at its n_past, its full pages shared (references taken).
  PoolSnapshot snapshot(const SequenceState& s);
  // dst (empty) = the snapshot's state: its pages shared, the rest written into new blocks and
  // dst's slot. false, changing nothing, when the pool lacks the blocks.
  bool restore(const PoolSnapshot& snap, SequenceState& dst);
  // Drops the snapshot's references (it is empty afterwards).
  void release(PoolSnapshot& snap);
  // One compressed page's rows of every layer, out of the pool and back into a new block (the
  // prefix cache's host and disk tiers); bytes of one such page: layout().cmp_page_bytes.
  std::vector<uint8_t> read_page(int32_t block);
  int32_t write_page(const uint8_t* bytes);  // -1 when no block is free
  void hold_page(int32_t block);             // one more reference on a compressed block
  void drop_page(int32_t block);
  int64_t free_pages() const { return static_cast<int64_t>(cmp_free_.size()); }
  // Uploads the page-table rows that changed since the last call (before a step's state ops;
  // never during a graph capture).
  void sync_tables();
  StatePoolStats stats() const;
  std::string describe() const;  // one line: pages, sizes, bytes per token
  // Tokens a sequence can hold at most here: min(max_context, what all pages hold).
  int64_t token_capacity() const;

 private:
  friend class SequenceState;
  void release_slot(int slot);
  void fill_free_lists();
  int32_t take(std::vector<int32_t>& free_list, std::vector<int32_t>& refs);
  void drop(int32_t block, std::vector<int32_t>& free_list, std::vector<int32_t>& refs);
  int32_t copy_cmp_block(int32_t src);
  int32_t copy_swa_block(int32_t src);
  void trim(SequenceState& s);  // releases SWA pages below high - window + 1 - rollback
  // The ring rows a compressor needs at n: [ring_first, n).
  int64_t ring_first(const StateLayout::Layer& y, bool indexer, int64_t n) const;
  template <typename F>
  void for_ring_rows(int64_t n, F&& f) const;  // f(layer, indexer, first, width, kv ring, gate ring)
  void set_entry(int slot, int64_t page, bool swa, int32_t block);

  int begin_;
  StateLayout lay_;
  Ops& ops_;
  struct Memory;
  std::vector<std::unique_ptr<Memory>> memory_;  // the backend allocations
  std::vector<LayerStorage> store_;
  int32_t* cmp_table_dev_ = nullptr;
  int32_t* swa_table_dev_ = nullptr;
  std::vector<int32_t> cmp_table_, swa_table_;  // host mirrors [slots, max_pages]
  std::vector<std::pair<int, int64_t>> dirty_;    // (slot, first page) of rows to upload, both tables
  std::vector<int32_t> cmp_free_, swa_free_, cmp_refs_, swa_refs_;
  std::vector<bool> slot_used_;
  int slots_used_ = 0;
};

}  // namespace hs
