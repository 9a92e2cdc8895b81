#include "engine/state_pool.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "engine/ops.h"
#include "util/error.h"

namespace hs {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int StateLayout::page_size(const ModelConfig& c) {
  // A multiple of every compression ratio (an entry's window never straddles pages) and at
  // least the window (a query's SWA rows lie in its own page and the one before).
  int64_t l = 1;
  for (int r : c.compress_ratios)
    if (r > 0) l = std::lcm(l, static_cast<int64_t>(r));
  const int64_t p = l * std::max<int64_t>(1, ceil_div(std::max(c.window, 1), l));
  HS_CHECK(p <= 65536, "state pool: a page of ", p, " positions (the compression ratios ",
           "and the window need a common multiple that large) is not supported");
  return static_cast<int>(p);
}

int64_t StateLayout::swa_pages_per_sequence() const {
  return 2 * (ceil_div(window - 1 + max_rollback, page) + 1);
}

int64_t StateLayout::sequence_bytes(int64_t n_tokens) const {
  const int64_t pages = ceil_div(n_tokens, page);
  return pages * cmp_page_bytes + std::min<int64_t>(pages, ceil_div(window - 1 + max_rollback, page) + 1) * swa_page_bytes +
         slot_bytes;
}

StateLayout make_state_layout(const ModelConfig& c, int layer_begin, int layer_end, const StatePoolOptions& o,
                              int64_t memory_bytes) {
  HS_CHECK(o.slots >= 1, "state pool: at least one sequence slot is needed, got ", o.slots);
  HS_CHECK(o.max_rollback >= 0 && o.max_rollback <= 1024, "state pool: max_rollback must be in [0, 1024], got ",
           o.max_rollback);
  StateLayout L;
  L.page = StateLayout::page_size(c);
  L.window = c.window;
  L.max_rollback = o.max_rollback;
  L.slots = o.slots;
  L.max_context = o.max_context > 0 ? o.max_context : c.max_position;
  HS_CHECK(L.max_context >= 1, "state pool: the model gives no maximum context (max_position_embeddings); set one");
  L.max_pages = ceil_div(L.max_context, L.page);
  const bool packed = o.packed;
  for (int l = layer_begin; l < layer_end; ++l) {
    StateLayout::Layer y;
    y.ratio = c.ratio(l);
    y.coff = y.ratio > 0 ? c.compress_coff(l) : 1;
    y.ring = y.ratio > 0 ? y.coff * y.ratio + o.max_rollback : 0;
    const RowForm kvf = packed ? RowForm::Fp8Kv : RowForm::F32;
    y.kv = RowFormat::make(kvf, c.head_dim, packed ? c.rope_dim : 0);
    if (y.ratio > 0) y.entry = y.kv;
    if (y.ratio > 0 && y.ratio == c.csa_ratio)
      y.key = RowFormat::make(packed ? RowForm::Fp4Index : RowForm::F32, c.index_head_dim, 0);
    L.swa_page_bytes += static_cast<int64_t>(L.page) * y.kv.bytes;
    if (y.ratio > 0) {
      L.cmp_page_bytes += static_cast<int64_t>(L.page / y.ratio) * (y.entry.bytes + y.key.bytes);
      L.slot_bytes += 2LL * y.ring * y.coff * c.head_dim * 4;
      if (y.key.d) L.slot_bytes += 2LL * y.ring * 2 * y.key.d * 4;
    }
    L.layers.push_back(y);
  }
  L.swa_blocks = static_cast<int64_t>(o.slots) * L.swa_pages_per_sequence();
  const int64_t fixed = L.swa_blocks * L.swa_page_bytes + o.slots * L.slot_bytes;
  const int64_t most = static_cast<int64_t>(o.slots) * L.max_pages;  // every slot at max_context
  if (L.cmp_page_bytes == 0) {
    L.cmp_blocks = most;  // SWA-only shard: pages cost nothing but their table entries
  } else {
    HS_CHECK(memory_bytes > fixed, "state pool: ", memory_bytes >> 20, " MiB is not enough for ", o.slots,
             " sequence slots (", fixed >> 20, " MiB before any page); give more memory or fewer slots");
    L.cmp_blocks = std::min(most, (memory_bytes - fixed) / L.cmp_page_bytes);
    HS_CHECK(L.cmp_blocks >= 1, "state pool: no room for a single page");
  }
  HS_CHECK(L.cmp_blocks < (int64_t{1} << 31) && L.swa_blocks < (int64_t{1} << 31) &&
               L.cmp_blocks * L.page < (int64_t{1} << 40),
           "state pool: too many pages");
  return L;
}

StateLayout model_state_layout(const ModelConfig& c, bool packed, int max_rollback) {
  StatePoolOptions o;
  o.slots = 1;
  o.max_rollback = max_rollback;
  o.packed = packed;
  o.max_context = std::max<int64_t>(c.max_position, 1);
  return make_state_layout(c, 0, c.n_layers, o, int64_t{1} << 62);
}

std::string describe_state_memory(const ModelConfig& c) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  for (const bool packed : {false, true}) {
    const StateLayout L = model_state_layout(c, packed);
    const double per_token = static_cast<double>(L.cmp_page_bytes) / L.page;
    os << "  " << (packed ? "model numerics (FP8 KV rows and entries, FP4 indexer keys)" : "reference numerics (F32)")
       << ": " << per_token << " B per token of context (compressed entries and indexer keys, in pages of " << L.page
       << "), plus " << (L.swa_page_bytes >> 10) << " KiB per SWA page (at most "
       << (L.window - 1 + L.max_rollback + L.page - 1) / L.page + 1 << " kept) and a " << (L.slot_bytes >> 10)
       << " KiB slot;";
    for (const int64_t n : {int64_t{4096}, int64_t{131072}, int64_t{1} << 20})
      os << " " << (n >= (1 << 20) ? std::to_string(n >> 20) + "M" : std::to_string(n >> 10) + "K") << ": "
         << static_cast<double>(L.sequence_bytes(n)) / (1 << 30) << " GiB";
    os << "\n";
  }
  return os.str();
}

// ---- SequenceState

SequenceState::~SequenceState() {
  if (!pool_) return;
  pool_->release_pages(*this);
  pool_->release_slot(slot_);
}

int SequenceState::layer_begin() const { return pool_->layer_begin(); }
int SequenceState::n_layers() const { return pool_->n_layers(); }
void SequenceState::reset() { pool_->release_pages(*this); }

int64_t SequenceState::bytes() const {
  const StateLayout& L = pool_->layout();
  int64_t swa = 0;
  for (int32_t b : swa_) swa += b >= 0;
  return static_cast<int64_t>(cmp_.size()) * L.cmp_page_bytes + swa * L.swa_page_bytes + L.slot_bytes;
}

// ---- StatePool

struct StatePool::Memory {
  std::unique_ptr<Ops::StateMemory> m;
};

StatePool::StatePool(const ModelConfig& c, int layer_begin, int layer_end, Ops& ops, const StatePoolOptions& o)
    : begin_(layer_begin), ops_(ops) {
  StatePoolOptions opts = o;
  opts.max_context = o.max_context > 0 ? o.max_context : c.max_position;
  int64_t budget = o.memory_bytes;
  if (budget <= 0) {
    const int64_t share = budget < 0 ? -budget : 1;
    // What every slot at max_context would take, bounded by the backend's suggestion.
    const StateLayout probe = make_state_layout(c, layer_begin, layer_end, opts, int64_t{1} << 62);
    const int64_t want = probe.swa_blocks * probe.swa_page_bytes + opts.slots * probe.slot_bytes +
                         probe.cmp_blocks * probe.cmp_page_bytes;
    budget = std::min<int64_t>(want, ops.state_memory_hint() / share);
  }
  lay_ = make_state_layout(c, layer_begin, layer_end, opts, budget);
  auto alloc = [&](int64_t bytes) -> uint8_t* {
    if (bytes <= 0) return nullptr;
    memory_.push_back(std::make_unique<Memory>(Memory{ops_.alloc_state(static_cast<size_t>(bytes))}));
    return static_cast<uint8_t*>(memory_.back()->m->data());
  };
  const int64_t S = lay_.slots;
  for (const StateLayout::Layer& y : lay_.layers) {
    LayerStorage st;
    st.kv = {alloc(lay_.swa_blocks * lay_.page * y.kv.bytes), y.kv, lay_.page};
    if (y.ratio > 0) {
      const int32_t epp = lay_.page / y.ratio;
      st.entries = {alloc(lay_.cmp_blocks * epp * y.entry.bytes), y.entry, epp};
      const int64_t w = y.coff * static_cast<int64_t>(c.head_dim);
      st.ring_kv = reinterpret_cast<float*>(alloc(S * y.ring * w * 4));
      st.ring_gate = reinterpret_cast<float*>(alloc(S * y.ring * w * 4));
      if (y.key.d) {
        st.keys = {alloc(lay_.cmp_blocks * epp * y.key.bytes), y.key, epp};
        const int64_t iw = 2LL * y.key.d;
        st.iring_kv = reinterpret_cast<float*>(alloc(S * y.ring * iw * 4));
        st.iring_gate = reinterpret_cast<float*>(alloc(S * y.ring * iw * 4));
      }
    }
    store_.push_back(st);
  }
  const int64_t table = S * lay_.max_pages;
  cmp_table_.assign(static_cast<size_t>(table), -1);
  swa_table_.assign(static_cast<size_t>(table), -1);
  cmp_table_dev_ = reinterpret_cast<int32_t*>(alloc(table * 4));
  swa_table_dev_ = reinterpret_cast<int32_t*>(alloc(table * 4));
  ops_.state_upload(cmp_table_dev_, cmp_table_.data(), static_cast<size_t>(table) * 4);
  ops_.state_upload(swa_table_dev_, swa_table_.data(), static_cast<size_t>(table) * 4);
  fill_free_lists();
  cmp_refs_.assign(static_cast<size_t>(lay_.cmp_blocks), 0);
  swa_refs_.assign(static_cast<size_t>(lay_.swa_blocks), 0);
  slot_used_.assign(static_cast<size_t>(S), false);
}

StatePool::~StatePool() = default;

void StatePool::fill_free_lists() {  // every block free, the lowest taken first
  cmp_free_.clear();
  swa_free_.clear();
  for (int64_t b = lay_.cmp_blocks - 1; b >= 0; --b) cmp_free_.push_back(static_cast<int32_t>(b));
  for (int64_t b = lay_.swa_blocks - 1; b >= 0; --b) swa_free_.push_back(static_cast<int32_t>(b));
}

const int32_t* StatePool::cmp_table() const { return cmp_table_dev_; }
const int32_t* StatePool::swa_table() const { return swa_table_dev_; }

std::unique_ptr<SequenceState> StatePool::acquire() {
  for (int s = 0; s < lay_.slots; ++s) {
    if (slot_used_[static_cast<size_t>(s)]) continue;
    slot_used_[static_cast<size_t>(s)] = true;
    ++slots_used_;
    return std::unique_ptr<SequenceState>(new SequenceState(this, s));
  }
  fail("state pool of layers [", begin_, ", ", begin_ + n_layers(), "): all ", lay_.slots,
       " sequence slots are in use (raise the engine's max_seqs)");
}

void StatePool::release_slot(int slot) {
  if (slot_used_.at(static_cast<size_t>(slot))) {
    slot_used_[static_cast<size_t>(slot)] = false;
    --slots_used_;
  }
}

int32_t StatePool::take(std::vector<int32_t>& free_list, std::vector<int32_t>& refs) {
  HS_CHECK(!free_list.empty(), "internal: state pool block taken with none free");
  const int32_t b = free_list.back();
  free_list.pop_back();
  refs[static_cast<size_t>(b)] = 1;
  return b;
}

void StatePool::drop(int32_t block, std::vector<int32_t>& free_list, std::vector<int32_t>& refs) {
  if (block < 0) return;
  int32_t& r = refs[static_cast<size_t>(block)];
  HS_CHECK(r > 0, "internal: state pool block ", block, " released twice");
  if (--r == 0) free_list.push_back(block);
}

void StatePool::set_entry(int slot, int64_t page, bool swa, int32_t block) {
  std::vector<int32_t>& t = swa ? swa_table_ : cmp_table_;
  t[static_cast<size_t>(slot * lay_.max_pages + page)] = block;
  dirty_.emplace_back(slot, page);
}

std::pair<int64_t, int64_t> StatePool::blocks_needed(const SequenceState& s, int64_t n) const {
  const int64_t end = s.n_past_ + n;
  const int64_t cmp = std::max<int64_t>(0, ceil_div(end, lay_.page) - static_cast<int64_t>(s.cmp_.size()));
  // The rows this step keeps: positions >= end - window + 1 - rollback, and those of the step.
  const int64_t keep = std::max<int64_t>(s.n_past_, end - lay_.window + 1 - lay_.max_rollback);
  int64_t swa = 0;
  for (int64_t j = std::max<int64_t>(keep, 0) / lay_.page; j * lay_.page < end; ++j)
    swa += j >= static_cast<int64_t>(s.swa_.size()) || s.swa_[static_cast<size_t>(j)] < 0;
  return {cmp, swa};
}

bool StatePool::reserve(SequenceState& s, int64_t n) {
  HS_CHECK(s.pool_ == this, "internal: a sequence reserved in another shard's pool");
  if (n <= 0) return true;
  const int64_t end = s.n_past_ + n;
  if (end > lay_.max_context) return false;
  const auto [cmp, swa] = blocks_needed(s, n);
  if (cmp > static_cast<int64_t>(cmp_free_.size()) || swa > static_cast<int64_t>(swa_free_.size())) return false;
  const int64_t pages = ceil_div(end, lay_.page);
  while (static_cast<int64_t>(s.cmp_.size()) < pages) {
    const int32_t b = take(cmp_free_, cmp_refs_);
    set_entry(s.slot_, static_cast<int64_t>(s.cmp_.size()), false, b);
    s.cmp_.push_back(b);
  }
  if (static_cast<int64_t>(s.swa_.size()) < pages) s.swa_.resize(static_cast<size_t>(pages), -1);
  const int64_t keep = std::max<int64_t>(s.n_past_, end - lay_.window + 1 - lay_.max_rollback);
  for (int64_t j = std::max<int64_t>(keep, 0) / lay_.page; j < pages; ++j) {
    int32_t& b = s.swa_[static_cast<size_t>(j)];
    if (b >= 0) continue;
    b = take(swa_free_, swa_refs_);
    set_entry(s.slot_, j, true, b);
  }
  return true;
}

void StatePool::trim(SequenceState& s) {
  const int64_t keep = s.high_ - lay_.window + 1 - lay_.max_rollback;  // the first row still needed
  for (int64_t j = 0; (j + 1) * lay_.page <= keep && j < static_cast<int64_t>(s.swa_.size()); ++j) {
    int32_t& b = s.swa_[static_cast<size_t>(j)];
    if (b < 0) continue;
    drop(b, swa_free_, swa_refs_);
    b = -1;
    set_entry(s.slot_, j, true, -1);
  }
}

void StatePool::advance(SequenceState& s, int64_t n) {
  HS_CHECK(static_cast<int64_t>(s.cmp_.size()) * lay_.page >= s.n_past_ + n,
           "internal: a sequence advanced past its reserved pages");
  s.n_past_ += n;
  s.high_ = std::max(s.high_, s.n_past_);
  trim(s);
}

void StatePool::release_pages(SequenceState& s) {
  for (size_t j = 0; j < s.cmp_.size(); ++j) {
    drop(s.cmp_[j], cmp_free_, cmp_refs_);
    set_entry(s.slot_, static_cast<int64_t>(j), false, -1);
  }
  for (size_t j = 0; j < s.swa_.size(); ++j) {
    if (s.swa_[j] < 0) continue;
    drop(s.swa_[j], swa_free_, swa_refs_);
    set_entry(s.slot_, static_cast<int64_t>(j), true, -1);
  }
  s.cmp_.clear();
  s.swa_.clear();
  s.n_past_ = 0;
  s.high_ = 0;
  s.floor_ = 0;
}

int32_t StatePool::copy_cmp_block(int32_t src) {
  const int32_t b = take(cmp_free_, cmp_refs_);
  for (const LayerStorage& st : store_) {
    if (st.entries.base) {
      const int64_t bytes = static_cast<int64_t>(st.entries.rows_per_block) * st.entries.fmt.bytes;
      ops_.state_copy(st.entries.row(b, 0), st.entries.row(src, 0), static_cast<size_t>(bytes));
    }
    if (st.keys.base) {
      const int64_t bytes = static_cast<int64_t>(st.keys.rows_per_block) * st.keys.fmt.bytes;
      ops_.state_copy(st.keys.row(b, 0), st.keys.row(src, 0), static_cast<size_t>(bytes));
    }
  }
  return b;
}

int32_t StatePool::copy_swa_block(int32_t src) {
  const int32_t b = take(swa_free_, swa_refs_);
  for (const LayerStorage& st : store_) {
    const int64_t bytes = static_cast<int64_t>(st.kv.rows_per_block) * st.kv.fmt.bytes;
    ops_.state_copy(st.kv.row(b, 0), st.kv.row(src, 0), static_cast<size_t>(bytes));
  }
  return b;
}

void StatePool::fork(const SequenceState& src, int64_t upto, SequenceState& dst) {
  HS_CHECK(src.pool_ == this && dst.pool_ == this, "fork: both sequences must belong to this shard's pool");
  HS_CHECK(&src != &dst, "fork: a sequence cannot be forked into itself");
  HS_CHECK(dst.n_past_ == 0 && dst.cmp_.empty(), "fork: the destination sequence must be empty (reset it first)");
  HS_CHECK(upto >= 0 && upto <= src.n_past_, "fork at position ", upto, ": the source holds ", src.n_past_,
           " tokens");
  HS_CHECK(upto >= src.high_ - lay_.max_rollback, "fork at position ", upto, ": the source got to position ",
           src.high_, " and keeps the rows of only the last ", lay_.max_rollback, " tokens before that");
  HS_CHECK(upto >= src.floor_, "fork at position ", upto, ": the source was restored at position ", src.floor_,
           " and holds no rows before it");
  if (upto == 0) return;
  const int64_t full = upto / lay_.page;
  const bool partial = upto % lay_.page != 0;
  const bool partial_swa = partial && src.swa_[static_cast<size_t>(full)] >= 0;
  HS_CHECK(!partial || (!cmp_free_.empty() && (!partial_swa || !swa_free_.empty())), "fork at position ", upto,
           ": the state pool has no free page for the partial last page");
  for (int64_t j = 0; j < full; ++j) {
    const int32_t c = src.cmp_[static_cast<size_t>(j)], w = src.swa_[static_cast<size_t>(j)];
    ++cmp_refs_[static_cast<size_t>(c)];
    if (w >= 0) ++swa_refs_[static_cast<size_t>(w)];
    dst.cmp_.push_back(c);
    dst.swa_.push_back(w);
    set_entry(dst.slot_, j, false, c);
    set_entry(dst.slot_, j, true, w);
  }
  if (partial) {
    const int32_t c = copy_cmp_block(src.cmp_[static_cast<size_t>(full)]);
    const int32_t w = partial_swa ? copy_swa_block(src.swa_[static_cast<size_t>(full)]) : -1;
    dst.cmp_.push_back(c);
    dst.swa_.push_back(w);
    set_entry(dst.slot_, full, false, c);
    set_entry(dst.slot_, full, true, w);
  }
  // The slot's rows: the ring holds positions by p % rows, so a copy keeps every position.
  for (size_t l = 0; l < store_.size(); ++l) {
    const StateLayout::Layer& y = lay_.layers[l];
    if (y.ratio == 0) continue;
    const LayerStorage& st = store_[l];
    const int64_t w = static_cast<int64_t>(y.ring) * y.coff * y.kv.d;
    for (float* ring : {st.ring_kv, st.ring_gate})
      ops_.state_copy(ring + dst.slot_ * w, ring + src.slot_ * w, static_cast<size_t>(w) * 4);
    if (y.key.d) {
      const int64_t iw = static_cast<int64_t>(y.ring) * 2 * y.key.d;
      for (float* ring : {st.iring_kv, st.iring_gate})
        ops_.state_copy(ring + dst.slot_ * iw, ring + src.slot_ * iw, static_cast<size_t>(iw) * 4);
    }
  }
  dst.n_past_ = upto;
  dst.high_ = src.high_;  // what the copied rows are valid for
  dst.floor_ = src.floor_;
}

void StatePool::truncate(SequenceState& s, int64_t n) {
  HS_CHECK(s.pool_ == this, "truncate: the sequence belongs to another pool");
  HS_CHECK(n >= 0 && n <= s.n_past_, "truncate to ", n, " tokens: the sequence holds ", s.n_past_);
  HS_CHECK(n >= s.high_ - lay_.max_rollback, "truncate to ", n, " tokens: the sequence got to ", s.high_,
           " and can be rolled back by at most ", lay_.max_rollback, " tokens from there");
  HS_CHECK(n >= s.floor_, "truncate to ", n, " tokens: the sequence was restored at position ", s.floor_,
           " and holds no rows before it");
  if (n == s.n_past_) return;
  if (n == 0) {
    release_pages(s);
    return;
  }
  const int64_t pages = ceil_div(n, lay_.page);
  const int64_t last = pages - 1;
  const bool partial = n % lay_.page != 0;
  const int32_t c = s.cmp_[static_cast<size_t>(last)], w = s.swa_[static_cast<size_t>(last)];
  const bool cow_c = partial && cmp_refs_[static_cast<size_t>(c)] > 1;
  const bool cow_w = partial && w >= 0 && swa_refs_[static_cast<size_t>(w)] > 1;
  HS_CHECK((!cow_c || !cmp_free_.empty()) && (!cow_w || !swa_free_.empty()), "truncate to ", n,
           " tokens: the page that becomes partial is shared and the pool has no free page to copy it to");
  for (int64_t j = static_cast<int64_t>(s.cmp_.size()) - 1; j >= pages; --j) {
    drop(s.cmp_[static_cast<size_t>(j)], cmp_free_, cmp_refs_);
    drop(s.swa_[static_cast<size_t>(j)], swa_free_, swa_refs_);
    set_entry(s.slot_, j, false, -1);
    set_entry(s.slot_, j, true, -1);
  }
  s.cmp_.resize(static_cast<size_t>(pages));
  s.swa_.resize(static_cast<size_t>(pages));
  if (cow_c) {
    const int32_t b = copy_cmp_block(c);
    drop(c, cmp_free_, cmp_refs_);
    s.cmp_[static_cast<size_t>(last)] = b;
    set_entry(s.slot_, last, false, b);
  }
  if (cow_w) {
    const int32_t b = copy_swa_block(w);
    drop(w, swa_free_, swa_refs_);
    s.swa_[static_cast<size_t>(last)] = b;
    set_entry(s.slot_, last, true, b);
  }
  s.n_past_ = n;  // high stays: it says which slot rows and SWA pages are still valid
}

void StatePool::sync_tables() {
  if (dirty_.empty()) return;
  std::sort(dirty_.begin(), dirty_.end());
  dirty_.erase(std::unique(dirty_.begin(), dirty_.end()), dirty_.end());
  // One upload per run of consecutive pages of a slot, for both tables.
  for (size_t i = 0; i < dirty_.size();) {
    size_t j = i + 1;
    while (j < dirty_.size() && dirty_[j].first == dirty_[i].first && dirty_[j].second == dirty_[j - 1].second + 1) ++j;
    const int64_t at = dirty_[i].first * lay_.max_pages + dirty_[i].second;
    const size_t bytes = (j - i) * 4;
    ops_.state_upload(cmp_table_dev_ + at, cmp_table_.data() + at, bytes);
    ops_.state_upload(swa_table_dev_ + at, swa_table_.data() + at, bytes);
    i = j;
  }
  dirty_.clear();
}

void StatePool::limit(int64_t cmp, int64_t swa) {
  HS_CHECK(slots_used_ == 0, "internal: StatePool::limit on a pool in use");
  HS_CHECK(cmp >= 1 && swa >= 1, "internal: StatePool::limit to ", cmp, " / ", swa, " pages");
  lay_.cmp_blocks = std::min(lay_.cmp_blocks, cmp);
  lay_.swa_blocks = std::min(lay_.swa_blocks, swa);
  fill_free_lists();
}

StatePoolStats StatePool::stats() const {
  StatePoolStats st;
  st.cmp_total = lay_.cmp_blocks;
  st.cmp_used = lay_.cmp_blocks - static_cast<int64_t>(cmp_free_.size());
  for (int32_t r : cmp_refs_) st.cmp_shared += r > 1;
  st.swa_total = lay_.swa_blocks;
  st.swa_used = lay_.swa_blocks - static_cast<int64_t>(swa_free_.size());
  st.slots_total = lay_.slots;
  st.slots_used = slots_used_;
  return st;
}

int64_t StatePool::token_capacity() const { return std::min(lay_.max_context, lay_.cmp_blocks * lay_.page); }

std::string StatePool::describe() const {
  std::ostringstream os;
  const double per_token = static_cast<double>(lay_.cmp_page_bytes) / lay_.page;
  os << "state pool [" << begin_ << ", " << begin_ + n_layers() << "): " << lay_.cmp_blocks << " pages of "
     << lay_.page << " positions (" << per_token << " B/token compressed), " << lay_.swa_blocks << " SWA pages of "
     << (lay_.swa_page_bytes >> 10) << " KiB, " << lay_.slots << " slots of " << (lay_.slot_bytes >> 10) << " KiB";
  return os.str();
}

}  // namespace hs
