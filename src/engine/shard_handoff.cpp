#include "engine/shard_handoff.h"

#include "util/error.h"

namespace hs {

namespace {

class SharedHandoff final : public ShardHandoff {
 public:
  Form form() const override { return Form::Shared; }
  void send(const float* src, float* dst, int64_t, HandoffFlight&) override {
    HS_CHECK(src == dst, "internal: a shared handoff between two buffers");
  }
  void receive(float*, int64_t, HandoffFlight&) override {}
};

// Through host memory, or device to device first where asked (falling back per step when the
// sender's backend declines the copy).
class CopyHandoff final : public ShardHandoff {
 public:
  CopyHandoff(Ops& from, Ops& to, bool device) : from_(from), to_(to), device_(device) {}
  Form form() const override { return device_ ? Form::Device : Form::Host; }
  void send(const float* src, float* dst, int64_t count, HandoffFlight& f) override {
    HS_CHECK(!f.token, "internal: a state sent over a boundary that still holds one");
    if (device_) f.token = from_.send_to(to_, dst, src, count);
    if (!f.token) {
      f.staging.resize(static_cast<size_t>(count));
      from_.download(f.staging.data(), src, count);
    }
  }
  void receive(float* dst, int64_t count, HandoffFlight& f) override {
    if (void* t = f.token) {
      f.token = nullptr;
      to_.accept(t);
      return;
    }
    HS_CHECK(static_cast<int64_t>(f.staging.size()) >= count, "internal: a state received before it was sent");
    to_.upload(dst, f.staging.data(), count);
  }

 private:
  Ops& from_;
  Ops& to_;
  bool device_;
};

}  // namespace

const char* ShardHandoff::name() const {
  switch (form()) {
    case Form::Shared: return "shared";
    case Form::Device: return "device";
    case Form::Host: return "host";
  }
  return "?";
}

std::unique_ptr<ShardHandoff> make_handoff(Ops& from, Ops& to, bool device_copy) {
  if (&from == &to) return std::make_unique<SharedHandoff>();
  return std::make_unique<CopyHandoff>(from, to, device_copy);
}

}  // namespace hs
