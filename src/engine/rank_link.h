// What the engine of one rank of a multi-process pipeline needs of the other ranks (issue 19;
// engine/distributed.h implements it, over NCCL between GPU ranks and TCP between CPU ranks).
// The engine drives it from Engine::step_batch, the one step path: rank 0 sends the step plan,
// every rank receives the HC state rows of each micro-batch from the previous rank and sends
// its own on, and the last rank sends the logits rows back to rank 0 at the end of the step.
#pragma once
#include <cstdint>
#include <string>

#include "engine/distributed_plan.h"
#include "engine/ops.h"
#include "util/error.h"

namespace hs {

// The pipeline of ranks stopped for good (a rank failed, died or lost rank 0): every later call
// throws it too. The server answers what is in flight with 503 and exits.
class PipelineDown : public Error {
 public:
  using Error::Error;
};

class RankLink {
 public:
  virtual ~RankLink() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // rank 0: the plan of the step about to run, to every other rank.
  virtual void send_plan(const dist::StepPlan& plan) = 0;
  // count floats of backend memory (of `ops`) to the next rank / from the previous one.
  virtual void send_state(Ops& ops, const float* x, int64_t count) = 0;
  virtual void recv_state(Ops& ops, float* x, int64_t count) = 0;
  // The last rank's logits rows to rank 0 / rank 0's receipt of them (backend memory).
  virtual void send_outputs(Ops& ops, const float* x, int64_t count) = 0;
  virtual void recv_outputs(Ops& ops, float* x, int64_t count) = 0;
  // A failure in the middle of a step (after the plan went out): the other ranks are told and
  // the pipeline stops; throws PipelineDown.
  [[noreturn]] virtual void fail(const std::string& why) = 0;
  // rank 0: the step whose plan went out is over (ran or failed); the link may look at the
  // other ranks between steps.
  virtual void end_step() {}
};

}  // namespace hs
