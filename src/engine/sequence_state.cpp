#include "engine/sequence_state.h"

#include <algorithm>

namespace hs {

void CompressorState::init(int ratio_, int coff_, int64_t d_, bool host_buffers) {
  ratio = ratio_;
  coff = coff_;
  d = d_;
  if (host_buffers) {
    buf_kv.assign(static_cast<size_t>(ratio * coff * d), 0.0f);
    buf_gate.assign(buf_kv.size(), 0.0f);
    prev_kv.assign(static_cast<size_t>(ratio * d), 0.0f);
    prev_gate.assign(prev_kv.size(), 0.0f);
  }
  reset();
}

void CompressorState::reset() {
  std::fill(buf_kv.begin(), buf_kv.end(), 0.0f);
  std::fill(buf_gate.begin(), buf_gate.end(), 0.0f);
  std::fill(prev_kv.begin(), prev_kv.end(), 0.0f);
  std::fill(prev_gate.begin(), prev_gate.end(), 0.0f);
  buf_n = 0;
  has_prev = false;
  entries.clear();
  entries.shrink_to_fit();
  n_entries = 0;
  if (device) device->reset();
}

void SequenceState::reset() {
  n_past = 0;
  for (auto& l : layers) {
    std::fill(l.ring.begin(), l.ring.end(), 0.0f);
    l.comp.reset();
    l.index.reset();
    if (l.device) l.device->reset();
  }
}

size_t SequenceState::bytes() const {
  size_t b = 0;
  for (const auto& l : layers) {
    b += l.ring.size() * 4;
    for (const auto* c : {&l.comp, &l.index}) {
      b += (c->buf_kv.size() + c->buf_gate.size() + c->prev_kv.size() + c->prev_gate.size() + c->entries.capacity()) * 4;
      if (c->device) b += c->device->bytes();
    }
    if (l.device) b += l.device->bytes();
  }
  return b;
}

}  // namespace hs
