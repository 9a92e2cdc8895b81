// How the HC state [rows, hc, D] of a step goes from one shard to the next (issue 19;
// docs/multi-gpu.md). The engine drives every boundary through this interface: the sender after
// its shard ran, the receiver before its shard runs (on the threads that drive each side, so a
// pipeline's micro-batches overlap). Forms in one process:
//
//   | form   | when                                  | what moves                                   |
//   |--------|---------------------------------------|----------------------------------------------|
//   | shared | both shards on one backend            | nothing: the next shard works on the buffer   |
//   | device | two GPUs, --peer-access auto or on    | a device-to-device copy (Ops::send_to)        |
//   | host   | CPU <-> GPU, or --peer-access off     | a download into host memory, then an upload   |
//
// A boundary between processes (NCCL point to point) is the next form (engine/distributed.h
// still moves the state itself).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/ops.h"

namespace hs {

// One micro-batch's state in flight over one boundary (the engine keeps one per boundary and
// micro-batch: several may be in flight at once).
struct HandoffFlight {
  void* token = nullptr;       // the device copy's (Ops::send_to), until received
  std::vector<float> staging;  // the host copy
};

class ShardHandoff {
 public:
  enum class Form { Shared, Device, Host };
  virtual ~ShardHandoff() = default;
  virtual Form form() const = 0;
  const char* name() const;  // "shared", "device", "host"
  // The sender's side: the state src (count floats on the sender's backend) on its way to dst
  // (on the receiver's backend).
  virtual void send(const float* src, float* dst, int64_t count, HandoffFlight& f) = 0;
  // The receiver's side: after it, the receiver's later work sees the state at dst.
  virtual void receive(float* dst, int64_t count, HandoffFlight& f) = 0;
};

// The in-process form from backend `from` to backend `to`: shared when they are one, device to
// device where `device_copy` (the engine's --peer-access decision) and the backends can (a
// backend that cannot copy to the other falls back to host memory, per step), else host.
std::unique_ptr<ShardHandoff> make_handoff(Ops& from, Ops& to, bool device_copy);

}  // namespace hs
