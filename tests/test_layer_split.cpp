// Layer splits from shares (engine/layer_split.h): exact counts, proportions with at least one
// layer per shard, the default from free memory, and errors that name the option.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/layer_split.h"
#include "util/error.h"

using namespace hs;

namespace {

std::vector<int> split(std::vector<double> s, int n) { return split_layers(s, n, "--layer-split"); }

TEST(LayerSplit, CountsThatSumToTheLayersAreTakenAsIs) {
  EXPECT_EQ(split({22, 21}, 43), (std::vector<int>{22, 21}));
  EXPECT_EQ(split({1, 42}, 43), (std::vector<int>{1, 42}));
  EXPECT_EQ(split({43}, 43), (std::vector<int>{43}));
}

TEST(LayerSplit, SharesAreProportionalWithAtLeastOneLayer) {
  EXPECT_EQ(split({1, 1}, 43), (std::vector<int>{21, 22}));      // ties to the later shard
  EXPECT_EQ(split({1, 1, 1}, 8), (std::vector<int>{2, 3, 3}));  // the old even split
  EXPECT_EQ(split({141.0, 70.5}, 43), (std::vector<int>{29, 14}));  // free GiB of two GPUs: 28.67 : 14.33
  EXPECT_EQ(split({1000, 1}, 4), (std::vector<int>{3, 1}));     // the small share still gets a layer
  EXPECT_EQ(split({1, 1000, 1}, 5), (std::vector<int>{1, 3, 1}));
  for (int n = 3; n < 70; ++n) {  // always a partition of the layers, every shard non-empty
    const std::vector<int> s = split({0.1, 7, 2.5}, n);
    EXPECT_EQ(std::accumulate(s.begin(), s.end(), 0), n);
    for (int x : s) EXPECT_GE(x, 1);
  }
}

TEST(LayerSplit, Errors) {
  try {
    split({1, 0}, 8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--layer-split 1,0: every share must be positive"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(split({1, 1, 1}, 2), Error);
  EXPECT_THROW(split({}, 2), Error);
  EXPECT_THROW(split({-1, 2}, 8), Error);
  EXPECT_THROW(device_free_bytes("tpu:0"), Error);
}

TEST(LayerSplit, DefaultSharesFromFreeMemory) {
  EXPECT_GT(device_free_bytes("cpu"), 0u);
  const std::vector<double> s = free_memory_shares({"cpu", "cpu"});  // one device named twice: halves
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], s[1]);
}

}  // namespace
