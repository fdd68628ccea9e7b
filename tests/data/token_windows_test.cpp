#include "mpitrain/data/token_windows.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace mpitrain::data {
namespace {

TEST(TokenWindows, Uint16WindowsOfBlockSizePlusOneStepByBlockSize) {
  // Tokens 1000..1011; range [2, 12): 10 tokens; block 4: windows at 2 and 6 ((10 - 1) / 4).
  std::vector<std::uint16_t> ids(12);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(1000 + i);
  const TokenWindows<std::uint16_t> d(
      TokenSequence<std::uint16_t>(std::make_shared<const std::vector<std::uint16_t>>(ids)), 2, 12, 4,
      50257, "tokens shard.bin", "tokens");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.feature_size(), 5u);
  EXPECT_EQ(d.num_classes(), 50257u);
  EXPECT_EQ(d.block_size(), 4u);
  std::vector<float> f(10);
  std::vector<std::int32_t> labels(2, -1);
  const std::vector<std::size_t> order{1, 0};
  d.get_batch(order, f, labels);
  // Each window's last token is the next one's first.
  EXPECT_EQ(f, (std::vector<float>{1006, 1007, 1008, 1009, 1010, 1002, 1003, 1004, 1005, 1006}));
  EXPECT_EQ(labels, (std::vector<std::int32_t>{0, 0}));
  EXPECT_EQ(d.describe(), "tokens shard.bin (2 windows of 5 tokens)");
}

TEST(TokenWindows, AWindowMaySpanTwoFilesOfTheCorpus) {
  // Three pieces (files) of 3, 0 and 4 tokens: 10 11 12 | | 20 21 22 23; block 2: windows at
  // 0, 2 and 4 ((7 - 1) / 2), the second spanning the boundary.
  const std::vector<std::uint16_t> a{10, 11, 12};
  const std::vector<std::uint16_t> b{20, 21, 22, 23};
  const TokenSequence<std::uint16_t> tokens({a, {}, b}, nullptr);
  const TokenWindows<std::uint16_t> d(tokens, 0, 7, 2, 100, "tokens two files", "tokens");
  ASSERT_EQ(d.size(), 3u);
  std::vector<float> f(9);
  std::vector<std::int32_t> labels(3, -1);
  d.get_batch(std::vector<std::size_t>{0, 1, 2}, f, labels);
  EXPECT_EQ(f, (std::vector<float>{10, 11, 12, 12, 20, 21, 21, 22, 23}));
}

TEST(TokenWindows, RefusesARangeWithoutAWindowNamingIt) {
  const TokenSequence<std::uint16_t> ids(
      std::make_shared<const std::vector<std::uint16_t>>(std::vector<std::uint16_t>{1, 2, 3}));
  try {
    TokenWindows<std::uint16_t>(ids, 0, 3, 3, 10, "tokens short", "tokens");
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "tokens short holds 3 tokens, fewer than one window of block_size + 1 = 4");
  }
  EXPECT_THROW(TokenWindows<std::uint16_t>(ids, 0, 4, 1, 10, "outside", "tokens"), std::invalid_argument);
  EXPECT_THROW(TokenWindows<std::uint16_t>(ids, 0, 3, 0, 10, "zero", "tokens"), std::invalid_argument);
}

}  // namespace
}  // namespace mpitrain::data
