// Snapshots of a sequence's state (state_pool.h PoolSnapshot), for the prefix cache: the full
// compressed pages shared by reference, everything else a restore needs copied to host memory
// (the partial last page, the window's SWA rows, the open compressor windows). A restore
// rebuilds exactly the state the sequence had: every byte it reads later is one of these.
#include <algorithm>
#include <cstring>

#include "engine/ops.h"
#include "engine/state_pool.h"
#include "util/error.h"

namespace hs {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t StatePool::ring_first(const StateLayout::Layer& y, bool indexer, int64_t n) const {
  const int co = indexer ? 2 : y.coff;
  return std::max<int64_t>(0, (n / y.ratio) * y.ratio - (co - 1) * static_cast<int64_t>(y.ratio));
}

// Every compressor's ring of slot `slot` with the rows a state at n needs, in a fixed order.
template <typename F>
void StatePool::for_ring_rows(int64_t n, F&& f) const {
  for (size_t l = 0; l < store_.size(); ++l) {
    const StateLayout::Layer& y = lay_.layers[l];
    if (y.ratio == 0) continue;
    const LayerStorage& st = store_[l];
    f(l, false, ring_first(y, false, n), static_cast<int64_t>(y.coff) * y.kv.d, st.ring_kv, st.ring_gate);
    if (y.key.d) f(l, true, ring_first(y, true, n), 2LL * y.key.d, st.iring_kv, st.iring_gate);
  }
}

std::vector<uint8_t> StatePool::read_page(int32_t block) {
  std::vector<uint8_t> out(static_cast<size_t>(lay_.cmp_page_bytes));
  size_t at = 0;
  for (const LayerStorage& st : store_)
    for (const PagedRows* r : {&st.entries, &st.keys}) {
      if (!r->base) continue;
      const size_t bytes = static_cast<size_t>(r->rows_per_block) * r->fmt.bytes;
      ops_.download(reinterpret_cast<float*>(out.data() + at), reinterpret_cast<const float*>(r->row(block, 0)),
                    static_cast<int64_t>(bytes / 4));
      at += bytes;
    }
  return out;
}

int32_t StatePool::write_page(const uint8_t* bytes) {
  if (cmp_free_.empty()) return -1;
  const int32_t block = take(cmp_free_, cmp_refs_);
  size_t at = 0;
  for (const LayerStorage& st : store_)
    for (const PagedRows* r : {&st.entries, &st.keys}) {
      if (!r->base) continue;
      const size_t n = static_cast<size_t>(r->rows_per_block) * r->fmt.bytes;
      ops_.state_upload(r->row(block, 0), bytes + at, n);
      at += n;
    }
  return block;
}

void StatePool::hold_page(int32_t block) {
  HS_CHECK(block >= 0 && block < lay_.cmp_blocks && cmp_refs_[static_cast<size_t>(block)] > 0,
           "internal: a reference on a free or unknown page ", block);
  ++cmp_refs_[static_cast<size_t>(block)];
}

void StatePool::drop_page(int32_t block) { drop(block, cmp_free_, cmp_refs_); }

PoolSnapshot StatePool::snapshot(const SequenceState& s) {
  HS_CHECK(s.pool_ == this, "snapshot: the sequence belongs to another pool");
  PoolSnapshot snap;
  const int64_t n = snap.n = s.n_past_, P = lay_.page;
  if (n == 0) return snap;
  for (int64_t j = 0; j < n / P; ++j) {
    const int32_t b = s.cmp_[static_cast<size_t>(j)];
    hold_page(b);
    snap.pages.push_back(b);
  }
  if (n % P) snap.partial = read_page(s.cmp_[static_cast<size_t>(n / P)]);
  // The SWA rows of the window before n: at most two runs per layer (the page boundary).
  const int64_t first = std::max<int64_t>(0, n - lay_.window + 1);
  for (const LayerStorage& st : store_) {
    const int64_t rb = st.kv.fmt.bytes;
    for (int64_t q = first; q < n;) {
      const int64_t run = std::min<int64_t>(n - q, P - q % P);
      const int32_t b = s.swa_[static_cast<size_t>(q / P)];
      HS_CHECK(b >= 0, "internal: snapshot of a sequence whose SWA rows at ", q, " are gone");
      const size_t at = snap.swa_rows.size();
      snap.swa_rows.resize(at + static_cast<size_t>(run * rb));
      ops_.download(reinterpret_cast<float*>(snap.swa_rows.data() + at),
                    reinterpret_cast<const float*>(st.kv.row(b, q % P)), run * rb / 4);
      q += run;
    }
  }
  // The open windows' raw rows (position q at ring row q % ring).
  for_ring_rows(n, [&](size_t l, bool, int64_t f0, int64_t width, float* kv, float* gate) {
    const int64_t S = lay_.layers[l].ring;
    for (float* ring : {kv, gate}) {
      const float* base = ring + static_cast<int64_t>(s.slot_) * S * width;
      for (int64_t q = f0; q < n;) {
        const int64_t run = std::min<int64_t>(n - q, S - q % S);
        const size_t at = snap.ring.size();
        snap.ring.resize(at + static_cast<size_t>(run * width));
        ops_.download(snap.ring.data() + at, base + (q % S) * width, run * width);
        q += run;
      }
    }
  });
  return snap;
}

bool StatePool::restore(const PoolSnapshot& snap, SequenceState& dst) {
  HS_CHECK(dst.pool_ == this, "restore: the sequence belongs to another pool");
  HS_CHECK(dst.n_past_ == 0 && dst.cmp_.empty(), "restore: the destination sequence must be empty");
  const int64_t n = snap.n, P = lay_.page;
  if (n == 0) return true;
  HS_CHECK(n <= lay_.max_context, "restore: a state of ", n, " tokens is longer than this pool's context");
  HS_CHECK(static_cast<int64_t>(snap.pages.size()) == n / P &&
               static_cast<int64_t>(snap.partial.size()) == (n % P ? lay_.cmp_page_bytes : 0),
           "internal: a snapshot of ", n, " tokens with ", snap.pages.size(), " pages and a partial page of ",
           snap.partial.size(), " bytes");
  const int64_t first = std::max<int64_t>(0, n - lay_.window + 1);
  const int64_t swa_pages = (n - 1) / P - first / P + 1;
  if ((n % P ? 1 : 0) > static_cast<int64_t>(cmp_free_.size()) || swa_pages > static_cast<int64_t>(swa_free_.size()))
    return false;
  const int64_t pages = ceil_div(n, P);
  for (int64_t j = 0; j < n / P; ++j) {
    const int32_t b = snap.pages[static_cast<size_t>(j)];
    hold_page(b);
    dst.cmp_.push_back(b);
    set_entry(dst.slot_, j, false, b);
  }
  if (n % P) {
    const int32_t b = write_page(snap.partial.data());
    dst.cmp_.push_back(b);
    set_entry(dst.slot_, n / P, false, b);
  }
  dst.swa_.assign(static_cast<size_t>(pages), -1);
  for (int64_t j = first / P; j <= (n - 1) / P; ++j) {
    const int32_t b = take(swa_free_, swa_refs_);
    dst.swa_[static_cast<size_t>(j)] = b;
    set_entry(dst.slot_, j, true, b);
  }
  size_t at = 0;
  for (const LayerStorage& st : store_) {
    const int64_t rb = st.kv.fmt.bytes;
    for (int64_t q = first; q < n;) {
      const int64_t run = std::min<int64_t>(n - q, P - q % P);
      ops_.state_upload(st.kv.row(dst.swa_[static_cast<size_t>(q / P)], q % P), snap.swa_rows.data() + at,
                        static_cast<size_t>(run * rb));
      at += static_cast<size_t>(run * rb);
      q += run;
    }
  }
  HS_CHECK(at == snap.swa_rows.size(), "internal: a snapshot's SWA rows do not match the pool's layout");
  size_t r = 0;
  for_ring_rows(n, [&](size_t l, bool, int64_t f0, int64_t width, float* kv, float* gate) {
    const int64_t S = lay_.layers[l].ring;
    for (float* ring : {kv, gate}) {
      float* base = ring + static_cast<int64_t>(dst.slot_) * S * width;
      for (int64_t q = f0; q < n;) {
        const int64_t run = std::min<int64_t>(n - q, S - q % S);
        HS_CHECK(r + static_cast<size_t>(run * width) <= snap.ring.size(), "internal: a snapshot's window rows are short");
        ops_.state_upload(base + (q % S) * width, snap.ring.data() + r, static_cast<size_t>(run * width) * 4);
        r += static_cast<size_t>(run * width);
        q += run;
      }
    }
  });
  HS_CHECK(r == snap.ring.size(), "internal: a snapshot's window rows do not match the pool's layout");
  dst.n_past_ = dst.high_ = dst.floor_ = n;
  return true;
}

void StatePool::release(PoolSnapshot& snap) {
  for (int32_t b : snap.pages) drop_page(b);
  snap = PoolSnapshot{};
}

}  // namespace hs
