// fletcher32: bit-identical to HDF5's definition (a direct transcription of
// H5_checksum_fletcher32's loop below) for every length and alignment, including the
// 360-word reduction boundaries, odd lengths and all-ones data.

#include "mpitrain/checkpoint/fletcher32.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace mpitrain::checkpoint {
namespace {

// HDF5's algorithm, one big-endian 16-bit word at a time.
std::uint32_t reference(const unsigned char* data, std::size_t bytes) {
  std::size_t len = bytes / 2;
  std::uint32_t sum1 = 0;
  std::uint32_t sum2 = 0;
  while (len > 0) {
    std::size_t tlen = len > 360 ? 360 : len;
    len -= tlen;
    do {
      sum1 += static_cast<std::uint32_t>(data[0]) << 8 | data[1];
      data += 2;
      sum2 += sum1;
    } while (--tlen > 0);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (bytes % 2 != 0) {
    sum1 += static_cast<std::uint32_t>(*data) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

TEST(Fletcher32, MatchesHdf5ForEveryLengthAndAlignment) {
  std::vector<unsigned char> data(6000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>((i * 151 + 7) % 256);
  for (std::size_t offset = 0; offset < 4; ++offset) {
    for (std::size_t length = 0; length + offset <= 2900; ++length) {
      ASSERT_EQ(fletcher32({data.data() + offset, length}), reference(data.data() + offset, length))
          << "offset " << offset << " length " << length;
    }
  }
  for (const std::size_t length : {std::size_t{5999}, std::size_t{5998}}) {
    EXPECT_EQ(fletcher32({data.data(), length}), reference(data.data(), length));
  }
  const std::vector<unsigned char> ones(100000, 0xff);  // largest sums: overflow behaviour
  EXPECT_EQ(fletcher32(ones), reference(ones.data(), ones.size()));
  EXPECT_EQ(fletcher32({}), 0u);
}

}  // namespace
}  // namespace mpitrain::checkpoint
