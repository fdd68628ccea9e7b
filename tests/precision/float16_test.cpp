// Scalar float32 <-> float16 conversions against numpy 1.24 (golden/make_golden.py) and
// hand-checked edge cases.
//
// NaN contract: a NaN stays a NaN, becomes quiet and keeps its sign and top payload bits
// (what x86 F16C does). numpy keeps signalling NaNs signalling, so NaN results are checked by
// that property: the golden value only tells that the result is a NaN.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "golden_data.hpp"
#include "mpitrain/precision/float16.hpp"
#include "test_bits.hpp"

namespace mpitrain {
namespace {

using test::bits_of;
using test::float_of;
using test::hex;

std::uint16_t f16(std::uint32_t float_bits) { return to_float16(float_of(float_bits)).bits; }
std::uint16_t f16(float x) { return to_float16(x).bits; }

static_assert(to_float16(1.0f).bits == 0x3c00u, "conversions are usable in constant expressions");
static_assert(to_float(float16::from_bits(0x0001u)) == 0x1p-24f);

// Checks a narrowing result against numpy's, with the NaN contract for NaN results.
void expect_narrowing(std::uint32_t in, std::uint16_t got, std::uint16_t numpy) {
  if (test::is_nan_f16(numpy)) {
    ASSERT_TRUE(test::is_nan32(in)) << "numpy made a NaN from " << hex(in);
    EXPECT_TRUE(test::is_quiet_nan_f16(got)) << "input " << hex(in) << " gave " << hex(got, 4);
    EXPECT_EQ(got & 0x8000u, (in >> 16) & 0x8000u) << "sign lost for " << hex(in);
    EXPECT_EQ(got, ((in >> 16) & 0x8000u) | 0x7e00u | ((in >> 13) & 0x03ffu))
        << "top payload bits not kept for " << hex(in);
  } else {
    EXPECT_EQ(got, numpy) << "input " << hex(in) << " (" << float_of(in) << ")";
  }
}

TEST(Float16, WideningMatchesNumpyForAll65536Patterns) {
  const auto cases = test::read_widening_cases("f16_to_f32");
  ASSERT_EQ(cases.input.size(), 65536u);
  for (std::size_t i = 0; i < cases.input.size(); ++i) {
    const std::uint16_t in = cases.input[i];
    const std::uint32_t got = bits_of(to_float(float16::from_bits(in)));
    if (test::is_nan32(cases.output[i])) {
      // numpy keeps the bits; the contract adds the quiet bit and keeps sign and payload.
      EXPECT_EQ(got, cases.output[i] | 0x00400000u) << "input " << hex(in, 4);
    } else {
      EXPECT_EQ(got, cases.output[i]) << "input " << hex(in, 4);
    }
  }
}

TEST(Float16, NarrowingMatchesNumpyOnEveryValueMidpointAndItsNeighbours) {
  const auto cases = test::read_narrowing_cases("f32_to_f16_grid");
  ASSERT_EQ(cases.input.size(), 63488u * 4u + 2048u);  // finite patterns x 4, inf/NaN x 1
  for (std::size_t i = 0; i < cases.input.size(); ++i) {
    expect_narrowing(cases.input[i], f16(cases.input[i]), cases.output[i]);
  }
}

TEST(Float16, NarrowingMatchesNumpyOnEdgeCasesAndRandomPatterns) {
  const auto cases = test::read_narrowing_cases("f32_to_f16_edge");
  for (std::size_t i = 0; i < cases.input.size(); ++i) {
    expect_narrowing(cases.input[i], f16(cases.input[i]), cases.output[i]);
  }
}

TEST(Float16, SignedZeroKeepsItsSign) {
  EXPECT_EQ(f16(0.0f), 0x0000u);
  EXPECT_EQ(f16(-0.0f), 0x8000u);
  EXPECT_EQ(bits_of(to_float(float16::from_bits(0x8000u))), 0x80000000u);
}

TEST(Float16, SubnormalsInBothDirections) {
  EXPECT_EQ(f16(0x1p-24f), 0x0001u);         // smallest subnormal
  EXPECT_EQ(f16(-0x1p-24f), 0x8001u);
  EXPECT_EQ(f16(0x1p-25f), 0x0000u);         // half of it: tie -> even (0)
  EXPECT_EQ(f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001u);
  EXPECT_EQ(f16(-0x1p-25f), 0x8000u);        // -> -0
  EXPECT_EQ(f16(3 * 0x1p-25f), 0x0002u);     // 1.5 ulp: tie -> even (2)
  EXPECT_EQ(f16(1023 * 0x1p-24f), 0x03ffu);  // largest subnormal
  EXPECT_EQ(f16(1023.5f * 0x1p-24f), 0x0400u);  // tie -> even: the smallest normal
  EXPECT_EQ(f16(std::nextafter(0x1p-14f, 0.0f)), 0x0400u);
  EXPECT_EQ(f16(0x1p-14f), 0x0400u);
  for (std::uint32_t h = 1; h < 0x0400u; ++h) {  // widening subnormals is exact
    EXPECT_EQ(to_float(float16::from_bits(static_cast<std::uint16_t>(h))), static_cast<float>(h) * 0x1p-24f);
  }
}

TEST(Float16, Float32SubnormalsBecomeSignedZero) {
  EXPECT_EQ(f16(0x00000001u), 0x0000u);
  EXPECT_EQ(f16(0x807fffffu), 0x8000u);
  EXPECT_EQ(f16(std::numeric_limits<float>::min()), 0x0000u);
}

TEST(Float16, OverflowToInfFrom65520Up) {
  EXPECT_EQ(f16(65504.0f), 0x7bffu);
  EXPECT_EQ(f16(std::nextafter(65520.0f, 0.0f)), 0x7bffu);  // 65519.996
  EXPECT_EQ(f16(65520.0f), 0x7c00u);
  EXPECT_EQ(f16(-65520.0f), 0xfc00u);
  EXPECT_EQ(f16(65536.0f), 0x7c00u);
  EXPECT_EQ(f16(1e10f), 0x7c00u);
  EXPECT_EQ(f16(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(f16(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(f16(-std::numeric_limits<float>::infinity()), 0xfc00u);
  EXPECT_EQ(to_float(float16::from_bits(0x7bffu)), 65504.0f);
  EXPECT_EQ(to_float(float16::from_bits(0xfc00u)), -std::numeric_limits<float>::infinity());
}

TEST(Float16, RoundsToNearestEven) {
  EXPECT_EQ(f16(0x3f801000u), 0x3c00u);  // 1 + 2^-11: tie -> even
  EXPECT_EQ(f16(0x3f803000u), 0x3c02u);  // 1 + 3 * 2^-11: tie -> even (up)
  EXPECT_EQ(f16(0x3f801001u), 0x3c01u);
  EXPECT_EQ(f16(0x3f800fffu), 0x3c00u);
  EXPECT_EQ(f16(0x477fe000u | 0x80000000u), 0xfbffu);
}

TEST(Float16, NanStaysNanQuietWithSign) {
  EXPECT_EQ(f16(0x7f800001u), 0x7e00u);  // payload below the kept bits: still a NaN
  EXPECT_EQ(f16(0xff800001u), 0xfe00u);
  EXPECT_EQ(f16(0x7fa00000u), 0x7f00u);  // signalling -> quiet, payload kept
  EXPECT_EQ(f16(0x7fc00000u), 0x7e00u);
  EXPECT_EQ(f16(0xffffffffu), 0xffffu);
  EXPECT_EQ(bits_of(to_float(float16::from_bits(0x7c01u))), 0x7fc02000u);
  EXPECT_EQ(bits_of(to_float(float16::from_bits(0xfd00u))), 0xffe00000u);
}

TEST(Float16, EveryNonNanPatternRoundTrips) {
  for (std::uint32_t h = 0; h < 65536u; ++h) {
    const auto x = float16::from_bits(static_cast<std::uint16_t>(h));
    if (test::is_nan_f16(x.bits)) continue;
    EXPECT_EQ(to_float16(to_float(x)).bits, h) << hex(h, 4);
  }
}

}  // namespace
}  // namespace mpitrain
