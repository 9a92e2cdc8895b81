// The handoff interface between consecutive shards (engine/shard_handoff.h, issue 19): its
// in-process forms on the CPU (shared on one backend, through host memory between two), and a
// GPU's device-to-device and host forms where one is present. Engine-level bit-identity of every
// split is test_layer_split's and test_pipeline's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/cpu_ops.h"
#include "engine/engine.h"
#include "engine/shard_handoff.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace hs {
namespace {

std::vector<float> state(int64_t n) {  // odd values: sign bits, denormals, a NaN payload survive only a bit copy
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i)) * 1e3f;
  v[1] = -0.0f;
  v[2] = 1e-41f;
  v[3] = std::nanf("7");
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ShardHandoff, OneBackendSharesTheBuffer) {
  ThreadPool pool(1);
  CpuOps ops(pool);
  auto h = make_handoff(ops, ops, true);
  EXPECT_EQ(h->form(), ShardHandoff::Form::Shared);
  EXPECT_STREQ(h->name(), "shared");
  std::vector<float> x = state(64);
  const std::vector<float> before = x;
  HandoffFlight f;
  h->send(x.data(), x.data(), 64, f);
  h->receive(x.data(), 64, f);
  EXPECT_TRUE(same_bits(x, before));
  std::vector<float> other(64);
  EXPECT_THROW(h->send(x.data(), other.data(), 64, f), Error) << "a shared handoff never copies";
}

// Two CPU backends (as a cpu,cpu split has when each shard gets its own): through host memory,
// bit for bit; two micro-batches in flight over one boundary keep their own copies.
TEST(ShardHandoff, TwoBackendsGoThroughHostMemory) {
  ThreadPool pool(1);
  CpuOps a(pool), b(pool);
  for (bool device : {false, true}) {  // a CPU backend declines device copies: host either way
    auto h = make_handoff(a, b, device);
    EXPECT_EQ(h->form(), device ? ShardHandoff::Form::Device : ShardHandoff::Form::Host);
    const std::vector<float> x1 = state(300), x2 = state(301);
    std::vector<float> y1(300, 5.0f), y2(301, 5.0f);
    HandoffFlight f1, f2;
    h->send(x1.data(), y1.data(), 300, f1);
    h->send(x2.data(), y2.data(), 301, f2);
    h->receive(y2.data(), 301, f2);
    h->receive(y1.data(), 300, f1);
    EXPECT_TRUE(same_bits(y1, x1));
    EXPECT_TRUE(same_bits(y2, x2));
    HandoffFlight empty;
    EXPECT_THROW(h->receive(y1.data(), 300, empty), Error) << "received before it was sent";
  }
}

// cpu -> cuda:0 -> cpu, and cuda:0 -> cuda:0 on two backends of one device (a device copy).
TEST(ShardHandoff, ToAndFromAGpu) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  ThreadPool pool(1);
  CpuOps cpu(pool);
  const std::unique_ptr<Ops> g1 = make_ops("cuda:0", pool, Numerics::Reference),
                             g2 = make_ops("cuda:0", pool, Numerics::Reference);
  const int64_t n = 4097;
  const std::vector<float> x = state(n);
  float* d1 = g1->alloc(n);
  float* d2 = g2->alloc(n);
  HandoffFlight f;
  auto up = make_handoff(cpu, *g1, false);
  EXPECT_EQ(up->form(), ShardHandoff::Form::Host);
  up->send(x.data(), d1, n, f);
  up->receive(d1, n, f);
  auto across = make_handoff(*g1, *g2, true);
  EXPECT_EQ(across->form(), ShardHandoff::Form::Device);
  HandoffFlight f2;
  across->send(d1, d2, n, f2);
  across->receive(d2, n, f2);
  std::vector<float> back(static_cast<size_t>(n), 5.0f);
  auto down = make_handoff(*g2, cpu, false);
  HandoffFlight f3;
  down->send(d2, back.data(), n, f3);
  down->receive(back.data(), n, f3);
  EXPECT_TRUE(same_bits(back, x));
}

}  // namespace
}  // namespace hs
