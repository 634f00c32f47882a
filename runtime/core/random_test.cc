#include "runtime/core/random.h"

#include <cmath>
#include <set>

#include "gtest/gtest.h"

namespace overlap {
namespace {

// Random123's known-answer vectors for Philox4x32-10 (kat_vectors).
TEST(RandomTest, PhiloxKnownAnswers) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(
      Philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

TEST(RandomTest, UniformIsInRangeAndBalanced) {
  const uint64_t key = RandomKey(7, "bernoulli_");
  const int n = 1 << 16;
  double sum = 0;
  int below_quarter = 0;
  for (int i = 0; i < n; ++i) {
    const float u = RandomUniform01(key, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    below_quarter += u < 0.25f;
  }
  // Mean 1/2 and P(u < 1/4) = 1/4 within five standard errors.
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(below_quarter / static_cast<double>(n), 0.25, 5 * std::sqrt(0.1875 / n));
}

TEST(RandomTest, KeysSeparateNodesRanksAndSteps) {
  std::set<uint64_t> keys;
  for (int64_t rank = 0; rank < 4; ++rank) {
    for (int64_t step = 0; step < 4; ++step) {
      for (const char* name : {"bernoulli_", "bernoulli__1"}) {
        keys.insert(RandomKey(RandomSeed(1, rank, step), name));
      }
    }
  }
  EXPECT_EQ(keys.size(), 32u);
  // Reproducible: the same key and index give the same draw.
  EXPECT_EQ(RandomUniform01(RandomKey(3, "x"), 12345), RandomUniform01(RandomKey(3, "x"), 12345));
  EXPECT_NE(RandomUniform01(RandomKey(3, "x"), 12345), RandomUniform01(RandomKey(4, "x"), 12345));
}

}  // namespace
}  // namespace overlap
