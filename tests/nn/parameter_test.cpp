// Parameter gradients: zero_grad works on owned and rebound (view) gradients; named_tensors
// lists the values under their names without copying them.
#include "mpitrain/nn/parameter.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
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

TEST(Parameter, NamedTensorsViewTheValuesInOrder) {
  Parameter a{"0.weight", Tensor({2, 3}), Tensor({2, 3})};
  Parameter b{"0.bias", Tensor({2}), Tensor({2})};
  const std::vector<Parameter*> params{&a, &b};
  const std::vector<NamedTensor> named = named_tensors(params);
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].name, "0.weight");
  EXPECT_EQ(named[0].tensor, &a.value);
  EXPECT_EQ(named[1].name, "0.bias");
  EXPECT_EQ(named[1].tensor, &b.value);
  const std::vector<Parameter*> with_null{&a, nullptr};
  EXPECT_THROW((void)named_tensors(with_null), std::invalid_argument);
}

}  // namespace
}  // namespace mpitrain::nn
