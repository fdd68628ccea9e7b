// Tensor buffers and Parameter gradients: resize keeps storage, zero_grad works on views.
#include "mpitrain/nn/tensor.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mpitrain/nn/parameter.hpp"

namespace mpitrain::nn {
namespace {

TEST(Tensor, ResizeKeepsStorageWhenSizeMatches) {
  Tensor t({4, 6});
  const float* before = t.data();
  t.resize({3, 8});
  EXPECT_EQ(t.data(), before);
  EXPECT_EQ(to_string(t.shape()), "[3, 8]");
  t.resize({5, 5});
  EXPECT_EQ(t.numel(), 25u);
  EXPECT_FALSE(t.is_view());
  EXPECT_EQ(to_string(t.shape()), "[5, 5]");
}

TEST(Tensor, UninitializedIsOwningAlignedAndShaped) {
  Tensor t = Tensor::uninitialized({3, 5});
  EXPECT_EQ(t.numel(), 15u);
  EXPECT_FALSE(t.is_view());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
  EXPECT_TRUE(Tensor::uninitialized({0, 4}).empty());
}

TEST(Tensor, ResizeOfAViewMakesItOwning) {
  std::vector<float> storage(6, 3.0f);
  Tensor v = Tensor::view(storage, {2, 3});
  v.resize({2, 3});
  EXPECT_FALSE(v.is_view());
  EXPECT_NE(v.data(), storage.data());
  EXPECT_EQ(storage[0], 3.0f);
}

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
