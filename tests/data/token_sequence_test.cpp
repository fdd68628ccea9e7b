// TokenSequence: pieces read as one sequence (empty pieces skipped), conversions that cross
// pieces, ranges past the end refused, and copies that share the pieces.

#include "mpitrain/data/token_sequence.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

namespace mpitrain::data {
namespace {

TEST(TokenSequence, ReadsPiecesAsOneSequence) {
  const std::vector<std::uint16_t> a{1, 2};
  const std::vector<std::uint16_t> b{3};
  const std::vector<std::uint16_t> c{4, 5, 65535};
  const TokenSequence<std::uint16_t> s({{}, a, {}, b, c, {}}, nullptr);
  EXPECT_EQ(s.size(), 6u);
  EXPECT_EQ(s.piece_count(), 3u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(s[i], i + 1) << i;
  EXPECT_EQ(s[5], 65535);
  std::vector<float> out(5, -1.0f);
  s.copy_to(1, out);  // from the middle of the first piece across the second into the third
  EXPECT_EQ(out, (std::vector<float>{2, 3, 4, 5, 65535}));
  std::vector<float> one(1, -1.0f);
  s.copy_to(2, one);  // a piece's first token
  EXPECT_EQ(one, (std::vector<float>{3}));
  s.copy_to(6, std::span<float>{});  // nothing, at the end
}

TEST(TokenSequence, RefusesARangePastTheEnd) {
  const TokenSequence<std::uint8_t> s(
      std::make_shared<const std::vector<std::uint8_t>>(std::vector<std::uint8_t>{7, 8, 9}));
  std::vector<float> out(2);
  EXPECT_NO_THROW(s.copy_to(1, out));
  EXPECT_EQ(out, (std::vector<float>{8, 9}));
  try {
    s.copy_to(2, out);
    ADD_FAILURE() << "expected an error";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "TokenSequence: tokens [2, 4) are not inside the 3 tokens");
  }
  EXPECT_THROW(s.copy_to(4, std::span<float>{}), std::out_of_range);
}

TEST(TokenSequence, EmptySequences) {
  const TokenSequence<std::uint16_t> none;
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.piece_count(), 0u);
  EXPECT_NO_THROW(none.copy_to(0, std::span<float>{}));
  const TokenSequence<std::uint16_t> null_vector(std::shared_ptr<const std::vector<std::uint16_t>>{});
  EXPECT_EQ(null_vector.size(), 0u);
  const TokenSequence<std::uint16_t> empty_pieces({{}, {}}, nullptr);
  EXPECT_EQ(empty_pieces.size(), 0u);
}

TEST(TokenSequence, CopiesShareThePiecesAndKeepThemAlive) {
  auto tokens = std::make_shared<const std::vector<std::uint8_t>>(std::vector<std::uint8_t>{4, 5, 6});
  const std::weak_ptr<const std::vector<std::uint8_t>> watch = tokens;
  TokenSequence<std::uint8_t> copy;
  {
    const TokenSequence<std::uint8_t> s(std::move(tokens));
    copy = s;
  }
  ASSERT_FALSE(watch.expired());  // the copy holds the vector
  EXPECT_EQ(copy[2], 6);
  copy = TokenSequence<std::uint8_t>();
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace mpitrain::data
