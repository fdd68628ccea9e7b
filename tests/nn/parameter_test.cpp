// Parameter gradients: zero_grad works on owned and rebound (view) gradients.
#include "mpitrain/nn/parameter.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace mpitrain::nn {
namespace {

TEST(Parameter, ZeroGradClearsOwnedAndReboundGradients) {
  Parameter a{"a", Tensor({3}), Tensor({3})};
  Parameter b{"b", Tensor({2}), Tensor({2})};
  a.grad.fill(1.5f);
  b.grad.fill(2.5f);
  std::vector<float> bucket(2, 0.0f);
  b.rebind_grad(bucket);
  EXPECT_EQ(bucket[1], 2.5f);  // rebind copies the current gradient
  zero_grad({&a, &b});
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(a.grad[i], 0.0f);
  EXPECT_EQ(bucket[0], 0.0f);
  EXPECT_EQ(bucket[1], 0.0f);
  EXPECT_EQ(b.grad.data(), bucket.data());
}

}  // namespace
}  // namespace mpitrain::nn
