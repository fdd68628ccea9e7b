// Tensor buffers: resize keeps storage, uninitialized is aligned, a resized view owns.
#include "mpitrain/tensor/tensor.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace mpitrain {
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

}  // namespace
}  // namespace mpitrain
