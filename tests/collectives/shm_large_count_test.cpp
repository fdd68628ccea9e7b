// More than 2^31 elements through shm_allreduce (u8 max, 2^31 + 5 elements in place, with the
// default workspace): every byte, those past the 2^31 boundary included, is reduced. Needs
// about 2 GiB per rank; registered at 1 and 2 ranks only.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mpitrain/collectives/detail/shm_collectives.hpp"
#include "shm_test_support.hpp"

namespace mpitrain {
namespace {

constexpr std::size_t kCount = (std::size_t{1} << 31) + 5;
// Rank r's bytes repeat kPeriod values in 0..127 plus 2 r, so the max is the last rank's
// pattern. kPeriod is prime and no power of two, so a piece at a wrong offset shows.
constexpr std::size_t kPeriod = 4093;

std::vector<std::uint8_t> pattern(int rank) {
  std::vector<std::uint8_t> p(kPeriod);
  for (std::size_t j = 0; j < kPeriod; ++j) {
    const auto base = static_cast<unsigned>((j * 37 + (j >> 3)) & 0x7fu);
    p[j] = static_cast<std::uint8_t>(base + 2u * static_cast<unsigned>(rank));
  }
  return p;
}

TEST(ShmLargeCount, AllreduceOfMoreThanTwoToTheThirtyOneElements) {
  test::NodeComm node;
  detail::ShmSegment seg(node.get());
  std::vector<std::uint8_t> data(kCount);
  const std::vector<std::uint8_t> mine = pattern(seg.rank());
  for (std::size_t off = 0; off < kCount; off += kPeriod) {
    std::memcpy(data.data() + off, mine.data(), std::min(kPeriod, kCount - off));
  }
  detail::shm_allreduce(seg, data.data(), data.data(), kCount, DType::u8, ReduceOp::max);
  const std::vector<std::uint8_t> want = pattern(seg.size() - 1);
  std::size_t wrong_blocks = 0;
  for (std::size_t off = 0; off < kCount; off += kPeriod) {
    const std::size_t len = std::min(kPeriod, kCount - off);
    wrong_blocks += std::memcmp(data.data() + off, want.data(), len) != 0;
  }
  EXPECT_EQ(wrong_blocks, 0u);
  EXPECT_EQ(data[kCount - 1], want[(kCount - 1) % kPeriod]);
}

}  // namespace
}  // namespace mpitrain
