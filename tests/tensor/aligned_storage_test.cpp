#include "mpitrain/tensor/aligned_storage.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace mpitrain {
namespace {

struct Free {
  void operator()(void* p) const noexcept { std::free(p); }
};

// Returns the largest power of two (up to 4 MiB) that divides the address of `p`.
std::size_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::size_t a = 1;
  while (a < (std::size_t{4} << 20) && address % (2 * a) == 0) a *= 2;
  return a;
}

TEST(AlignedStorageTest, SmallBuffersAreCacheLineAlignedLargeOnesHugePageAligned) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{64}, std::size_t{1000},
                            kHugePageBytes - 1}) {
    std::unique_ptr<void, Free> p(allocate_aligned(bytes));
    ASSERT_NE(p.get(), nullptr);
    EXPECT_GE(alignment_of(p.get()), 64u) << bytes << " bytes";
    std::memset(p.get(), 0xab, bytes);  // every byte asked for is usable
  }
  for (std::size_t bytes : {kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes + 5}) {
    std::unique_ptr<void, Free> p(allocate_aligned(bytes));
    ASSERT_NE(p.get(), nullptr);
    EXPECT_GE(alignment_of(p.get()), kHugePageBytes) << bytes << " bytes";
    std::memset(p.get(), 0xab, bytes);
    EXPECT_EQ(static_cast<unsigned char*>(p.get())[bytes - 1], 0xab);
  }
}

TEST(AlignedStorageTest, AnImpossibleSizeThrowsBadAlloc) {
  EXPECT_THROW(allocate_aligned(std::size_t{1} << 62), std::bad_alloc);
}

}  // namespace
}  // namespace mpitrain
