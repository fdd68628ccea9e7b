// Counts above 2^31 - 1 elements: a u8 allreduce (max) and a broadcast of 2^31 + 5 bytes go
// through MPI in pieces, and every byte, those past the 2^31 boundary included, arrives.
// Needs about 2 GiB per buffer; registered at 1 and 2 ranks only.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

constexpr std::size_t kCount = (std::size_t{1} << 31) + 5;

// Rank r's bytes repeat a pattern of kPeriod values in 0..127, plus 2 r (so the max over ranks
// is the last rank's pattern). kPeriod is prime, and so is the piece length 2^31 - 1, so a
// piece landing at a wrong offset cannot reproduce the pattern. Filling and checking go
// block by block with memcpy/memcmp to keep the 2 GiB passes short.
constexpr std::size_t kPeriod = 4093;

std::vector<std::uint8_t> pattern(int rank) {
  std::vector<std::uint8_t> p(kPeriod);
  for (std::size_t j = 0; j < kPeriod; ++j) {
    p[j] = static_cast<std::uint8_t>(((j * 37 + (j >> 3)) & 0x7fu) + 2u * static_cast<unsigned>(rank));
  }
  return p;
}

void fill(std::vector<std::uint8_t>& data, int rank) {
  const std::vector<std::uint8_t> p = pattern(rank);
  for (std::size_t off = 0; off < data.size(); off += kPeriod) {
    std::memcpy(data.data() + off, p.data(), std::min(kPeriod, data.size() - off));
  }
}

// Returns the number of bytes that differ from rank `rank`'s pattern.
std::size_t count_wrong(const std::vector<std::uint8_t>& data, int rank) {
  const std::vector<std::uint8_t> p = pattern(rank);
  std::size_t wrong = 0;
  for (std::size_t off = 0; off < data.size(); off += kPeriod) {
    const std::size_t len = std::min(kPeriod, data.size() - off);
    if (std::memcmp(data.data() + off, p.data(), len) == 0) continue;
    for (std::size_t j = 0; j < len; ++j) wrong += data[off + j] != p[j];
  }
  return wrong;
}

class LargeCountTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
};

TEST_F(LargeCountTest, AllreduceMaxOfMoreThanIntMaxBytes) {
  static_assert(kCount > 2147483647u);
  std::vector<std::uint8_t> data(kCount);
  fill(data, comm_.rank());
  comm_.allreduce<std::uint8_t>(data, ReduceOp::max);
  EXPECT_EQ(count_wrong(data, comm_.size() - 1), 0u);
  EXPECT_EQ(data[kCount - 1], pattern(comm_.size() - 1)[(kCount - 1) % kPeriod]);
}

TEST_F(LargeCountTest, BroadcastOfMoreThanIntMaxBytes) {
  const int root = comm_.size() - 1;
  std::vector<std::uint8_t> data(kCount, 0xff);  // 0xff: never a pattern value
  if (comm_.rank() == root) fill(data, root);
  comm_.broadcast<std::uint8_t>(data, root);
  EXPECT_EQ(count_wrong(data, root), 0u);
}

}  // namespace
}  // namespace mpitrain
