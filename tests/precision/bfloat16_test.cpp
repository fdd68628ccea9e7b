// Scalar float32 <-> bfloat16 conversions against torch 1.13 (golden/make_golden.py) and
// hand-checked edge cases.
//
// NaN contract: a NaN stays a NaN, becomes quiet and keeps its sign (and its top payload bits).
// torch returns a canonical positive NaN instead, so NaN results are checked by that property:
// the golden value only tells that the result is a NaN.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "golden_data.hpp"
#include "mpitrain/precision/bfloat16.hpp"
#include "test_bits.hpp"

namespace mpitrain {
namespace {

using test::bits_of;
using test::float_of;
using test::hex;

std::uint16_t bf16(std::uint32_t float_bits) { return to_bfloat16(float_of(float_bits)).bits; }

static_assert(to_bfloat16(1.0f).bits == 0x3f80u, "conversions are usable in constant expressions");
static_assert(to_float(bfloat16::from_bits(0xc040u)) == -3.0f);

TEST(BFloat16, WideningMatchesTorchForAll65536Patterns) {
  const auto cases = test::read_widening_cases("bf16_to_f32");
  ASSERT_EQ(cases.input.size(), 65536u);
  for (std::size_t i = 0; i < cases.input.size(); ++i) {
    const std::uint16_t in = cases.input[i];
    const std::uint32_t got = bits_of(to_float(bfloat16::from_bits(in)));
    if (test::is_nan32(cases.output[i])) {
      // torch copies the bits; the contract adds the quiet bit and keeps sign and payload.
      EXPECT_EQ(got, cases.output[i] | 0x00400000u) << "input " << hex(in, 4);
    } else {
      EXPECT_EQ(got, cases.output[i]) << "input " << hex(in, 4);
    }
  }
}

TEST(BFloat16, NarrowingMatchesTorchOnEdgeCasesMidpointsAndRandomPatterns) {
  const auto cases = test::read_narrowing_cases("f32_to_bf16");
  std::size_t nan_cases = 0;
  for (std::size_t i = 0; i < cases.input.size(); ++i) {
    const std::uint32_t in = cases.input[i];
    const std::uint16_t got = bf16(in);
    if (test::is_nan_bf16(cases.output[i])) {
      ++nan_cases;
      ASSERT_TRUE(test::is_nan32(in)) << "torch made a NaN from " << hex(in);
      EXPECT_TRUE(test::is_quiet_nan_bf16(got)) << "input " << hex(in) << " gave " << hex(got, 4);
      EXPECT_EQ(got & 0x8000u, (in >> 16) & 0x8000u) << "sign lost for " << hex(in);
      EXPECT_EQ(got, ((in >> 16) | 0x0040u)) << "top payload bits not kept for " << hex(in);
    } else {
      EXPECT_EQ(got, cases.output[i]) << "input " << hex(in);
    }
  }
  EXPECT_GT(nan_cases, 10u);  // the golden set covers NaNs of both signs and kinds
}

TEST(BFloat16, SignedZeroKeepsItsSign) {
  EXPECT_EQ(to_bfloat16(0.0f).bits, 0x0000u);
  EXPECT_EQ(to_bfloat16(-0.0f).bits, 0x8000u);
  EXPECT_TRUE(std::signbit(to_float(bfloat16::from_bits(0x8000u))));
}

TEST(BFloat16, Float32SubnormalsRoundToBFloat16Subnormals) {
  EXPECT_EQ(bf16(0x00000001u), 0x0000u);  // far below half an ulp
  EXPECT_EQ(bf16(0x80000001u), 0x8000u);  // -> -0
  EXPECT_EQ(bf16(0x00008000u), 0x0000u);  // tie -> even (0)
  EXPECT_EQ(bf16(0x00008001u), 0x0001u);  // just above the tie
  EXPECT_EQ(bf16(0x00018000u), 0x0002u);  // tie -> even (2)
  EXPECT_EQ(bf16(0x007fffffu), 0x0080u);  // largest subnormal rounds up to the smallest normal
  EXPECT_EQ(to_float(bfloat16::from_bits(0x0001u)), 0x1p-133f);
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(bf16(0x3f808000u), 0x3f80u);  // 1 + 2^-8: tie -> even
  EXPECT_EQ(bf16(0x3f818000u), 0x3f82u);  // tie -> even (up)
  EXPECT_EQ(bf16(0x3f807fffu), 0x3f80u);
  EXPECT_EQ(bf16(0x3f808001u), 0x3f81u);
  EXPECT_EQ(bf16(0xbf808001u), 0xbf81u);
}

TEST(BFloat16, ValuesPastTheLargestFiniteRoundToInf) {
  EXPECT_EQ(bf16(0x7f7f0000u), 0x7f7fu);  // largest finite bfloat16
  EXPECT_EQ(bf16(0x7f7f7fffu), 0x7f7fu);
  EXPECT_EQ(bf16(0x7f7f8000u), 0x7f80u);  // tie with an odd mantissa -> inf
  EXPECT_EQ(to_bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80u);
  EXPECT_EQ(to_bfloat16(-std::numeric_limits<float>::max()).bits, 0xff80u);
  EXPECT_EQ(to_bfloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80u);
  EXPECT_EQ(to_bfloat16(-std::numeric_limits<float>::infinity()).bits, 0xff80u);
}

TEST(BFloat16, NanStaysNanQuietWithSign) {
  // Payload only in the low 16 bits: plain rounding would give inf.
  EXPECT_EQ(bf16(0x7f800001u), 0x7fc0u);
  EXPECT_EQ(bf16(0xff800001u), 0xffc0u);
  EXPECT_EQ(bf16(0x7fa00000u), 0x7fe0u);  // signalling, payload kept
  EXPECT_EQ(bf16(0xffc00000u), 0xffc0u);
  EXPECT_EQ(bf16(0x7fffffffu), 0x7fffu);
  // Widening quiets a signalling bfloat16 NaN and keeps sign and payload.
  EXPECT_EQ(bits_of(to_float(bfloat16::from_bits(0x7f81u))), 0x7fc10000u);
  EXPECT_EQ(bits_of(to_float(bfloat16::from_bits(0xffa0u))), 0xffe00000u);
}

TEST(BFloat16, EveryNonNanPatternRoundTrips) {
  for (std::uint32_t b = 0; b < 65536u; ++b) {
    const auto x = bfloat16::from_bits(static_cast<std::uint16_t>(b));
    if (test::is_nan_bf16(x.bits)) continue;
    EXPECT_EQ(to_bfloat16(to_float(x)).bits, b) << hex(b, 4);
  }
}

}  // namespace
}  // namespace mpitrain
