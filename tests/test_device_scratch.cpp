// Two threads drive two devices at the same instant (issue: layer split, ownership). Each
// DeviceContext owns its scratch behind its own lock; nothing is shared between devices, so
// two threads released together by a barrier must each get their own device's memory and each
// compute what their device computes alone. Shapes go small -> large -> small on both devices
// so the arenas grow while the other device is busy. Skipped without enough GPUs (CI has none;
// run on the two-GPU lease machine).
#include <gtest/gtest.h>

#include <barrier>
#include <cstdio>
#include <thread>

#include "fixture_util.h"
#include "util/error.h"
#ifdef HS_HAVE_CUDA
#include "kernels/cuda/device_context.h"
#endif

using namespace hs;

namespace {

#ifdef HS_HAVE_CUDA
// The device a pointer lives on (cudaPointerGetAttributes).
int device_of(const void* p) {
  cudaPointerAttributes a{};
  HS_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
  return a.device;
}

// Two contexts (two GPUs, or the same GPU twice when there is one), two threads: at each
// barrier both take a lease of the same round's size, fill it with their own byte, meet again
// and read it back. A lease shared between the contexts, or memory on the wrong device, shows
// up as the other thread's byte or a wrong device id.
void scratch_at_the_same_instant(int dev_a, int dev_b) {
  cuda::DeviceContext ctx[2] = {cuda::DeviceContext(dev_a), cuda::DeviceContext(dev_b)};
  const size_t sizes[] = {size_t{4} << 10, size_t{256} << 20, size_t{4} << 10, size_t{64} << 20};
  std::barrier sync(2);
  std::string errors[2];
  auto worker = [&](int i) {
    try {
      for (size_t round = 0; round < std::size(sizes); ++round) {
        sync.arrive_and_wait();
        auto lease = ctx[i].scratch(sizes[round]);
        EXPECT_EQ(device_of(lease.data()), ctx[i].device()) << "thread " << i << " round " << round;
        const int byte = 0x10 * (i + 1) + static_cast<int>(round);
        ctx[i].fill_bytes(lease.data(), byte, sizes[round]);
        ctx[i].synchronize();
        sync.arrive_and_wait();  // the other thread has filled its lease too
        unsigned char head = 0, tail = 0;
        ctx[i].download(&head, lease.data(), 1);
        ctx[i].download(&tail, lease.as<unsigned char>(sizes[round] - 1), 1);
        ctx[i].synchronize();
        EXPECT_EQ(head, byte) << "thread " << i << " round " << round;
        EXPECT_EQ(tail, byte) << "thread " << i << " round " << round;
      }
    } catch (const std::exception& e) {
      errors[i] = e.what();
      sync.arrive_and_drop();
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_GE(ctx[0].scratch_capacity(), sizes[1]);
  EXPECT_GE(ctx[1].scratch_capacity(), sizes[1]);
}
#endif

TEST(DeviceScratch, TwoContextsTwoThreadsAtOnce) {
#ifdef HS_HAVE_CUDA
  const int gpus = gpu_count();
  if (gpus < 1) GTEST_SKIP() << "no CUDA device";
  scratch_at_the_same_instant(0, 0);  // the same GPU twice: still two owners, two arenas
  if (gpus < 2) GTEST_SKIP() << "one GPU: the cuda:0 + cuda:1 case was not run";
  scratch_at_the_same_instant(0, 1);
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// Two engines, one per device, stepped by two threads released together at every chunk. The
// two threads walk the prompt in opposite shapes (one token at a time while the other takes
// the long chunk), then reset and go again the other way round, so each device's scratch grows
// small -> large -> small while the other is mid-step. Each result must equal what that device
// computes alone (and match the HF fixture like the parity test).
TEST(DeviceScratch, TwoEnginesSteppedTogether) {
  const int gpus = gpu_count();
  if (gpus < 1) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(HS_TEST_DATA) + "/small-bf16";
  test::Expected e = test::load_expected(dir);
  const int64_t T = static_cast<int64_t>(e.tokens.size());
  const std::string devs[2] = {"cuda:0", gpus >= 2 ? "cuda:1" : "cuda:0"};
  std::unique_ptr<Engine> eng[2];
  for (int i = 0; i < 2; ++i) {
    EngineOptions o;
    o.device = devs[i];
    eng[i] = std::make_unique<Engine>(dir, o);
  }
  // Chunk plans of equal length (the barrier needs both threads at every step): small steps
  // first and the rest in one chunk, or one big chunk first and small steps after.
  const int64_t small = 6;
  std::vector<int64_t> small_first(small, 1), big_first;
  small_first.push_back(T - small);
  big_first.push_back(T - small);
  big_first.insert(big_first.end(), small, 1);
  const std::vector<int64_t> plans[2][2] = {{small_first, big_first}, {big_first, small_first}};

  // Alone first: each engine's own result for each plan.
  std::vector<float> alone[2][2];
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < 2; ++r) alone[i][r] = test::run(*eng[i], e, plans[i][r]);

  std::barrier sync(2);
  std::vector<float> together[2][2];
  std::string errors[2];
  auto worker = [&](int i) {
    try {
      auto seq = eng[i]->new_sequence();
      for (int r = 0; r < 2; ++r) {
        seq->reset();
        together[i][r].assign(e.tokens.size() * static_cast<size_t>(e.vocab), 0.0f);
        int64_t pos = 0;
        for (int64_t c : plans[i][r]) {
          sync.arrive_and_wait();
          eng[i]->step(*seq, e.tokens.data() + pos, c, together[i][r].data() + pos * e.vocab);
          pos += c;
        }
      }
    } catch (const std::exception& ex) {
      errors[i] = ex.what();
      sync.arrive_and_drop();
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < 2; ++r) {
      const auto& a = together[i][r];
      const double vs_alone = test::rel_l2(a.data(), alone[i][r].data(), a.size());
      const double vs_hf = test::rel_l2(a.data(), e.logits.data(), a.size());
      std::printf("[device-scratch] %s plan %d: rel_l2 vs alone %.3e, vs HF %.3e\n", devs[i].c_str(), r, vs_alone,
                  vs_hf);
      EXPECT_LE(vs_alone, 1e-6) << devs[i] << " plan " << r;
      EXPECT_LE(vs_hf, 1e-4) << devs[i] << " plan " << r;
      EXPECT_EQ(test::argmax_mismatches(a, e.logits, e.vocab), 0) << devs[i] << " plan " << r;
    }
  if (gpus < 2) GTEST_SKIP() << "one GPU: both engines ran on cuda:0";
}

}  // namespace
