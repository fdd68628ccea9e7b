// fast_math: accuracy of exp_fast, tanh_fast and erf_as against double-precision libm on
// dense grids, and their special values.
#include "mpitrain/nn/fast_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace mpitrain::nn {
namespace {

constexpr double kUlp1 = 0x1.0p-23;  // float spacing just above 1: relative ulp bound

TEST(FastMath, ExpWithinTwoUlp) {
  double worst = 0;
  for (double xd = -87.0; xd < 88.5; xd += 1e-3) {
    const float x = static_cast<float>(xd);
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(exp_fast(x) - ref) / ref);
  }
  EXPECT_LE(worst, 2 * kUlp1);
  EXPECT_EQ(exp_fast(0.0f), 1.0f);
  EXPECT_EQ(exp_fast(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_fast(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_fast(-90.0f), 0.0f);
  EXPECT_EQ(exp_fast(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(exp_fast(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastMath, TanhWithinThreeUlp) {
  double worst = 0;
  for (double xd = -12.0; xd < 12.0; xd += 1e-4) {
    const float x = static_cast<float>(xd);
    const double ref = std::tanh(static_cast<double>(x));
    if (ref != 0) worst = std::max(worst, std::abs(tanh_fast(x) - ref) / std::abs(ref));
  }
  EXPECT_LE(worst, 3 * kUlp1);
  EXPECT_EQ(tanh_fast(0.0f), 0.0f);
  EXPECT_EQ(tanh_fast(1e-20f), 1e-20f);
  EXPECT_EQ(tanh_fast(20.0f), 1.0f);
  EXPECT_EQ(tanh_fast(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(tanh_fast(std::numeric_limits<float>::quiet_NaN())));
}

// A&S 7.1.26 is good to 1.5e-7 absolute in exact arithmetic; the float evaluation of
// 1 - p t e^(-x^2) adds a few roundings of values near 1 (6e-8 each).
TEST(FastMath, ErfWithinSixTenthsOfAMillionth) {
  double worst = 0;
  for (double xd = -8.0; xd < 8.0; xd += 1e-4) {
    const float x = static_cast<float>(xd);
    worst = std::max(worst, std::abs(erf_as(x) - std::erf(static_cast<double>(x))));
  }
  EXPECT_LE(worst, 6e-7);
  EXPECT_LE(std::abs(erf_as(0.0f)), 1.5e-7);
  EXPECT_EQ(erf_as(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(erf_as(-10.0f), -1.0f);
  EXPECT_TRUE(std::isnan(erf_as(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace mpitrain::nn
