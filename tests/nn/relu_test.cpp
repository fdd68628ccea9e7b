// ReLU: torch parity, NaN propagation, finite differences, bf16 rounding.
#include "mpitrain/nn/relu.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "activations_common.hpp"

namespace mpitrain::nn {
namespace {

// max(x, 0) and its mask are exact in float: rtol 0 would do; 1e-6 for form's sake.
TEST(ReLU, MatchesTorch) {
  ReLU relu;
  testing::expect_layer_matches_torch(relu, "relu", 1e-6);
}

TEST(ReLU, PropagatesNaNLikeTorch) {
  ReLU relu;
  Tensor x({3});
  x[0] = -1.0f;
  x[1] = NAN;
  x[2] = 2.0f;
  const Tensor y = relu.forward(x);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 2.0f);
}

// Inputs kept at least 0.1 away from the kink and h = 1e-2: piecewise linear, so central
// differences are exact up to float rounding of L over 2h (~1e-5 on unit gradients).
TEST(ReLU, GradientMatchesFiniteDifferences) {
  Rng rng(21);
  Tensor x = testing::random_tensor({4, 5}, rng);
  for (float& v : x.span()) v += v < 0 ? -0.1f : 0.1f;
  ReLU relu;
  testing::check_gradients(relu, x, 1e-2f, 1e-3);
}

TEST(ReLU, RoundsOutputAndGradientUnderBf16) {
  ReLU relu;
  relu.set_precision(Precision::bf16);
  Tensor x({2});
  x[0] = 1.0f + 0x1.0p-10f;  // rounds to 1 in bf16 (8 significant bits)
  x[1] = -3.0f;
  const Tensor y = relu.forward(x);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  Tensor g({2});
  g[0] = 3.0f + 0x1.0p-9f;  // rounds to 3
  g[1] = 5.0f;
  const Tensor dx = relu.backward(g);
  EXPECT_EQ(dx[0], 3.0f);
  EXPECT_EQ(dx[1], 0.0f);
}

}  // namespace
}  // namespace mpitrain::nn
