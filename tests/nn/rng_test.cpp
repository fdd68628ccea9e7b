// Rng: Philox4x32-10 known answers, stream independence, exact save/restore, distributions.
#include "mpitrain/nn/rng.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mpitrain::nn {
namespace {

// Known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds).
TEST(Rng, PhiloxKnownAnswers) {
  using A4 = std::array<std::uint32_t, 4>;
  EXPECT_EQ(Rng::philox({0, 0, 0, 0}, {0, 0}),
            (A4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(Rng::philox({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                        {0xffffffffu, 0xffffffffu}),
            (A4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(Rng::philox({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                        {0xa4093822u, 0x299f31d0u}),
            (A4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Rng, DrawsAreTheBlocksOfCounterAndStream) {
  Rng rng(0x0000000500000007ull, 3);
  for (std::uint32_t block = 0; block < 3; ++block) {
    const auto expected = Rng::philox({block, 0, 3, 0}, {7, 5});
    for (int j = 0; j < 4; ++j) EXPECT_EQ(rng.next_u32(), expected[j]);
  }
  EXPECT_EQ(rng.position(), 12u);
}

TEST(Rng, SameSeedAndStreamRepeatOtherStreamsDiffer) {
  Rng a(42), b(42), c = Rng(42).split(1), d(43);
  int equal_c = 0, equal_d = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::uint32_t va = a.next_u32();
    EXPECT_EQ(va, b.next_u32());
    equal_c += va == c.next_u32();
    equal_d += va == d.next_u32();
  }
  EXPECT_LE(equal_c, 1);
  EXPECT_LE(equal_d, 1);
}

TEST(Rng, StateDictRestoresTheExactContinuation) {
  Rng a(123456789012345ull, 77);
  for (int i = 0; i < 7; ++i) a.next_u32();  // mid-block: position 7
  const StateDict saved = a.state_dict();
  std::vector<float> expected;
  for (int i = 0; i < 20; ++i) expected.push_back(a.normal());
  Rng b(1, 1);
  b.load_state_dict(saved);
  EXPECT_EQ(b.seed(), 123456789012345ull);
  EXPECT_EQ(b.stream(), 77u);
  EXPECT_EQ(b.position(), 7u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(b.normal(), expected[static_cast<std::size_t>(i)]);
}

TEST(Rng, LoadRejectsMissingOrBadScalars) {
  StateDict s = Rng(5).state_dict();
  s.scalars.erase("stream_hi");
  EXPECT_THROW(Rng().load_state_dict(s), std::invalid_argument);
  s = Rng(5).state_dict();
  s.scalars["position_lo"] = 1.5;
  EXPECT_THROW(Rng().load_state_dict(s), std::invalid_argument);
}

TEST(Rng, BulkFillEqualsSingleDraws) {
  // Start mid-block and cover several 8-block groups plus a tail.
  Rng a(31, 4), b(31, 4);
  a.next_u32();
  b.next_u32();
  std::vector<std::uint32_t> bulk(3 + 4 * 8 * 3 + 5);
  a.fill_u32(bulk);
  for (std::size_t i = 0; i < bulk.size(); ++i) EXPECT_EQ(bulk[i], b.next_u32()) << i;
  EXPECT_EQ(a.position(), b.position());
  EXPECT_EQ(a.next_u32(), b.next_u32());
}

TEST(Rng, SkipEqualsDrawing) {
  Rng a(9, 2), b(9, 2);
  for (int i = 0; i < 13; ++i) a.next_u32();
  b.skip(13);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
}

TEST(Rng, UniformAndNormalMoments) {
  // 200k samples: the mean's standard error is 0.29/sqrt(2e5) = 6.5e-4 (uniform) and
  // 2.2e-3 (normal); bounds are about 5 standard errors.
  Rng rng(2024);
  const int n = 200000;
  double su = 0, su2 = 0, sn = 0, sn2 = 0;
  float lo = 1, hi = 0;
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform();
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    su += u;
    su2 += static_cast<double>(u) * u;
    const double z = rng.normal();
    sn += z;
    sn2 += z * z;
  }
  EXPECT_GE(lo, 0.0f);
  EXPECT_LT(hi, 1.0f);
  EXPECT_NEAR(su / n, 0.5, 3e-3);
  EXPECT_NEAR(su2 / n - (su / n) * (su / n), 1.0 / 12.0, 2e-3);
  EXPECT_NEAR(sn / n, 0.0, 1e-2);
  EXPECT_NEAR(sn2 / n, 1.0, 1.5e-2);
}

}  // namespace
}  // namespace mpitrain::nn
