// Bulk conversions and fused 16-bit sums (convert.hpp) on every SimdPath. Each path must give
// the scalar conversions' results bit for bit; the scalar conversions themselves are checked
// against numpy/torch golden data in float16_test.cpp and bfloat16_test.cpp, and here the
// same golden inputs are run through the bulk paths.
//
// Exception, by IEEE 754: when an addition meets NaN operands, which payload survives is not
// specified, so for accumulate/add_rounded a NaN result is checked by the contract property
// only (NaN, quiet).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "golden_data.hpp"
#include "mpitrain/precision/convert.hpp"
#include "test_bits.hpp"

namespace mpitrain {
namespace {

using test::bits_of;
using test::float_of;
using test::hex;

class ConvertTest : public ::testing::TestWithParam<SimdPath> {
 protected:
  void SetUp() override {
    if (!simd_path_supported(path())) {
      GTEST_SKIP() << "this CPU cannot run the " << to_string(path()) << " path";
    }
  }
  SimdPath path() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(AllPaths, ConvertTest,
                         ::testing::Values(SimdPath::portable, SimdPath::avx2_f16c),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Returns `n` float32 values whose bit patterns sweep the whole 32-bit range evenly (every
// exponent, both signs, NaNs and infinities included) with varied mantissas.
std::vector<float> sweep_all_patterns(std::size_t n) {
  std::vector<float> values(n);
  const std::uint64_t stride = (std::uint64_t{1} << 32) / n;
  for (std::size_t i = 0; i < n; ++i) {
    values[i] = float_of(static_cast<std::uint32_t>(i * stride + (i * 2654435761u) % stride));
  }
  return values;
}

template <class T>
std::vector<T> random_16bit(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffff);
  std::vector<T> values(n);
  for (auto& v : values) v = T::from_bits(static_cast<std::uint16_t>(bits(rng)));
  return values;
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float range) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-range, range);
  std::vector<float> values(n);
  for (auto& v : values) v = value(rng);
  return values;
}

// Expects got == want bitwise, except that when `want` is a NaN only NaN-and-quiet is required.
void expect_sum_bits(std::uint32_t got, std::uint32_t want, std::size_t i) {
  if (test::is_nan32(want)) {
    EXPECT_TRUE(test::is_quiet_nan32(got)) << "element " << i << ": " << hex(got);
  } else {
    EXPECT_EQ(got, want) << "element " << i;
  }
}

// ---- conversions: bit-identical to the scalar code ------------------------------------------

TEST_P(ConvertTest, NarrowingEqualsScalarOnGoldenInputs) {
  for (const char* group : {"f32_to_f16_grid", "f32_to_f16_edge", "f32_to_bf16"}) {
    const auto cases = test::read_narrowing_cases(group);
    std::vector<float> in(cases.input.size());
    std::transform(cases.input.begin(), cases.input.end(), in.begin(), float_of);
    std::vector<float16> h(in.size());
    std::vector<bfloat16> b(in.size());
    detail::convert(in, std::span(h), path());
    detail::convert(in, std::span(b), path());
    for (std::size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(h[i], to_float16(in[i])) << group << " input " << hex(cases.input[i]);
      ASSERT_EQ(b[i], to_bfloat16(in[i])) << group << " input " << hex(cases.input[i]);
    }
  }
}

TEST_P(ConvertTest, WideningEqualsScalarForAll65536Patterns) {
  std::vector<float16> h(65536);
  std::vector<bfloat16> b(65536);
  for (std::uint32_t i = 0; i < 65536u; ++i) {
    h[i] = float16::from_bits(static_cast<std::uint16_t>(i));
    b[i] = bfloat16::from_bits(static_cast<std::uint16_t>(i));
  }
  std::vector<float> from_h(h.size()), from_b(b.size());
  detail::convert(std::span<const float16>(h), std::span(from_h), path());
  detail::convert(std::span<const bfloat16>(b), std::span(from_b), path());
  for (std::uint32_t i = 0; i < 65536u; ++i) {
    ASSERT_EQ(bits_of(from_h[i]), bits_of(to_float(h[i]))) << hex(i, 4);
    ASSERT_EQ(bits_of(from_b[i]), bits_of(to_float(b[i]))) << hex(i, 4);
  }
}

TEST_P(ConvertTest, NarrowingAndRoundingEqualScalarAcrossAllBitPatterns) {
  const std::vector<float> in = sweep_all_patterns(std::size_t{1} << 20);
  std::vector<float16> h(in.size());
  std::vector<bfloat16> b(in.size());
  detail::convert(in, std::span(h), path());
  detail::convert(in, std::span(b), path());
  std::vector<float> rounded_h = in, rounded_b = in;
  detail::round_to_float16(rounded_h, path());
  detail::round_to_bfloat16(rounded_b, path());
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(h[i], to_float16(in[i])) << hex(bits_of(in[i]));
    ASSERT_EQ(b[i], to_bfloat16(in[i])) << hex(bits_of(in[i]));
    ASSERT_EQ(bits_of(rounded_h[i]), bits_of(to_float(to_float16(in[i])))) << hex(bits_of(in[i]));
    ASSERT_EQ(bits_of(rounded_b[i]), bits_of(to_float(to_bfloat16(in[i])))) << hex(bits_of(in[i]));
  }
}

// Every length 0..67 at offsets 0..3 runs the vector loop, the scalar tail and unaligned
// accesses; the element past the end must stay untouched.
TEST_P(ConvertTest, EveryLengthAndOffsetMatchesScalar) {
  const std::vector<float> source = sweep_all_patterns(80);
  const auto h_source = random_16bit<float16>(80, 1);
  const auto b_source = random_16bit<bfloat16>(80, 2);
  const float kGuard = 12345.0f;
  for (std::size_t offset = 0; offset < 4; ++offset) {
    for (std::size_t n = 0; n <= 67; ++n) {
      const std::span<const float> in(source.data() + offset, n);
      std::vector<float16> h(offset + n + 1, float16::from_bits(0x1234));
      std::vector<bfloat16> b(offset + n + 1, bfloat16::from_bits(0x1234));
      detail::convert(in, std::span(h).subspan(offset, n), path());
      detail::convert(in, std::span(b).subspan(offset, n), path());
      std::vector<float> from_h(offset + n + 1, kGuard), from_b(offset + n + 1, kGuard);
      detail::convert(std::span(h_source).subspan(offset, n), std::span(from_h).subspan(offset, n), path());
      detail::convert(std::span(b_source).subspan(offset, n), std::span(from_b).subspan(offset, n), path());
      std::vector<float> round_h(source.begin(), source.end()), round_b = round_h;
      detail::round_to_float16(std::span(round_h).subspan(offset, n), path());
      detail::round_to_bfloat16(std::span(round_b).subspan(offset, n), path());
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t j = offset + i;
        ASSERT_EQ(h[j], to_float16(in[i])) << "n " << n << " offset " << offset << " i " << i;
        ASSERT_EQ(b[j], to_bfloat16(in[i])) << "n " << n << " offset " << offset << " i " << i;
        ASSERT_EQ(bits_of(from_h[j]), bits_of(to_float(h_source[j]))) << "n " << n << " i " << i;
        ASSERT_EQ(bits_of(from_b[j]), bits_of(to_float(b_source[j]))) << "n " << n << " i " << i;
        ASSERT_EQ(bits_of(round_h[j]), bits_of(to_float(to_float16(source[j])))) << "n " << n;
        ASSERT_EQ(bits_of(round_b[j]), bits_of(to_float(to_bfloat16(source[j])))) << "n " << n;
      }
      EXPECT_EQ(h[offset + n], float16::from_bits(0x1234)) << "wrote past the end, n " << n;
      EXPECT_EQ(b[offset + n], bfloat16::from_bits(0x1234)) << "wrote past the end, n " << n;
      EXPECT_EQ(from_h[offset + n], kGuard) << "wrote past the end, n " << n;
      EXPECT_EQ(from_b[offset + n], kGuard) << "wrote past the end, n " << n;
      EXPECT_EQ(bits_of(round_h[offset + n]), bits_of(source[offset + n])) << "n " << n;
      EXPECT_EQ(bits_of(round_b[offset + n]), bits_of(source[offset + n])) << "n " << n;
    }
  }
}

// ---- fused sums ------------------------------------------------------------------------------

TEST_P(ConvertTest, AccumulateAddsWidenedValuesInFp32) {
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{8}, std::size_t{4099}, std::size_t{1} << 16}) {
    const auto h = random_16bit<float16>(n, 3);  // includes inf and NaN patterns
    const auto b = random_16bit<bfloat16>(n, 4);
    const std::vector<float> start = random_floats(n, 5, 70000.0f);
    std::vector<float> acc_h = start, acc_b = start;
    detail::accumulate(std::span(h), std::span(acc_h), path());
    detail::accumulate(std::span(b), std::span(acc_b), path());
    for (std::size_t i = 0; i < n; ++i) {
      expect_sum_bits(bits_of(acc_h[i]), bits_of(start[i] + to_float(h[i])), i);
      expect_sum_bits(bits_of(acc_b[i]), bits_of(start[i] + to_float(b[i])), i);
    }
  }
}

TEST_P(ConvertTest, AddRoundedEqualsScalarRoundedSum) {
  for (std::size_t n : {std::size_t{0}, std::size_t{3}, std::size_t{16}, std::size_t{1031}, std::size_t{1} << 18}) {
    const auto ha = random_16bit<float16>(n, 6);
    const auto hb = random_16bit<float16>(n, 7);
    const auto ba = random_16bit<bfloat16>(n, 8);
    const auto bb = random_16bit<bfloat16>(n, 9);
    std::vector<float16> h = hb;
    std::vector<bfloat16> b = bb;
    detail::add_rounded(std::span(ha), std::span(h), path());
    detail::add_rounded(std::span(ba), std::span(b), path());
    for (std::size_t i = 0; i < n; ++i) {
      const float16 want_h = to_float16(to_float(ha[i]) + to_float(hb[i]));
      const bfloat16 want_b = to_bfloat16(to_float(ba[i]) + to_float(bb[i]));
      if (test::is_nan_f16(want_h.bits)) {
        EXPECT_TRUE(test::is_quiet_nan_f16(h[i].bits)) << i << ": " << hex(h[i].bits, 4);
      } else {
        EXPECT_EQ(h[i], want_h) << hex(ha[i].bits, 4) << " + " << hex(hb[i].bits, 4);
      }
      if (test::is_nan_bf16(want_b.bits)) {
        EXPECT_TRUE(test::is_quiet_nan_bf16(b[i].bits)) << i << ": " << hex(b[i].bits, 4);
      } else {
        EXPECT_EQ(b[i], want_b) << hex(ba[i].bits, 4) << " + " << hex(bb[i].bits, 4);
      }
    }
  }
}

// Returns the float16 nearest (ties to even) to the exact sum of two finite float16 values,
// computed without float32: the sum is an integer number of 2^-24 units below 2^41.
std::uint16_t exact_float16_sum(float16 a, float16 b) {
  const double sum = static_cast<double>(to_float(a)) + static_cast<double>(to_float(b));  // exact
  const double magnitude = std::fabs(sum);
  const auto units = static_cast<std::int64_t>(magnitude * 0x1p24);
  // Spacing of float16 values at this magnitude, in 2^-24 units (1 for subnormals).
  const int exponent = units == 0 ? -24 : std::ilogb(magnitude);
  const std::int64_t spacing = std::int64_t{1} << std::max(exponent + 14, 0);
  const std::int64_t below = units / spacing * spacing;
  const std::int64_t twice_rest = 2 * (units - below);
  const bool up = twice_rest > spacing || (twice_rest == spacing && (below / spacing) % 2 == 1);
  const double rounded = static_cast<double>(below + (up ? spacing : 0)) * 0x1p-24;
  const std::uint16_t sign = std::signbit(sum) ? 0x8000u : 0u;
  if (rounded > 65504.0) return sign | 0x7c00u;
  return sign | to_float16(static_cast<float>(rounded)).bits;  // exact: a float16 value
}

TEST_P(ConvertTest, Float16AddRoundedIsTheCorrectlyRoundedSum) {
  // Every finite float16 plus random finite partners, including ties and overflow.
  std::vector<float16> a, b;
  std::mt19937 rng(10);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffff);
  for (std::uint32_t x = 0; x < 65536u; ++x) {
    if ((x & 0x7c00u) == 0x7c00u) continue;
    for (int k = 0; k < 4; ++k) {
      std::uint16_t y;
      do y = static_cast<std::uint16_t>(bits(rng)); while ((y & 0x7c00u) == 0x7c00u);
      a.push_back(float16::from_bits(static_cast<std::uint16_t>(x)));
      b.push_back(float16::from_bits(y));
    }
  }
  std::vector<float16> sum = b;
  detail::add_rounded(std::span<const float16>(a), std::span(sum), path());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(sum[i].bits, exact_float16_sum(a[i], b[i])) << hex(a[i].bits, 4) << " + " << hex(b[i].bits, 4);
  }
  // Hand-checked: 2048 + 1 is a tie at spacing 2 -> even (2048); 2048 + 3 -> 2052 (even);
  // 65504 + 16 is the overflow threshold -> inf; 65504 + 15.99 stays finite.
  std::vector<float16> x{to_float16(2048.0f), to_float16(2048.0f), to_float16(65504.0f), to_float16(65504.0f)};
  std::vector<float16> y{to_float16(1.0f), to_float16(3.0f), to_float16(16.0f), to_float16(15.984375f)};
  detail::add_rounded(std::span<const float16>(x), std::span(y), path());
  EXPECT_EQ(to_float(y[0]), 2048.0f);
  EXPECT_EQ(to_float(y[1]), 2052.0f);
  EXPECT_EQ(y[2].bits, 0x7c00u);
  EXPECT_EQ(to_float(y[3]), 65504.0f);
}

TEST_P(ConvertTest, AddRoundedAcceptsTheSameSpanTwice) {
  auto h = random_16bit<float16>(1000, 11);
  auto b = random_16bit<bfloat16>(1000, 12);
  const auto h0 = h;
  const auto b0 = b;
  detail::add_rounded(std::span<const float16>(h), std::span(h), path());
  detail::add_rounded(std::span<const bfloat16>(b), std::span(b), path());
  for (std::size_t i = 0; i < h.size(); ++i) {
    const float16 want_h = to_float16(2.0f * to_float(h0[i]));
    const bfloat16 want_b = to_bfloat16(2.0f * to_float(b0[i]));
    if (test::is_nan_f16(want_h.bits)) {
      EXPECT_TRUE(test::is_quiet_nan_f16(h[i].bits));
    } else {
      EXPECT_EQ(h[i], want_h) << hex(h0[i].bits, 4);
    }
    if (test::is_nan_bf16(want_b.bits)) {
      EXPECT_TRUE(test::is_quiet_nan_bf16(b[i].bits));
    } else {
      EXPECT_EQ(b[i], want_b) << hex(b0[i].bits, 4);
    }
  }
}

// ---- errors ----------------------------------------------------------------------------------

// Expects `call` to throw std::invalid_argument whose message names `function` and both sizes.
template <class Call>
void expect_size_error(Call call, const std::string& function) {
  try {
    call();
    ADD_FAILURE() << function << " accepted spans of 7 and 9 elements";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(function), std::string::npos) << message;
    EXPECT_NE(message.find(" 7 elements"), std::string::npos) << message;
    EXPECT_NE(message.find(" 9"), std::string::npos) << message;
  }
}

TEST_P(ConvertTest, SizeMismatchThrowsNamingBothSizes) {
  std::vector<float> f7(7), f9(9);
  std::vector<float16> h7(7), h9(9);
  std::vector<bfloat16> b7(7), b9(9);
  const SimdPath p = path();
  expect_size_error([&] { detail::convert(std::span<const float>(f7), std::span(h9), p); }, "convert");
  expect_size_error([&] { detail::convert(std::span<const float>(f7), std::span(b9), p); }, "convert");
  expect_size_error([&] { detail::convert(std::span<const float16>(h7), std::span(f9), p); }, "convert");
  expect_size_error([&] { detail::convert(std::span<const bfloat16>(b7), std::span(f9), p); }, "convert");
  expect_size_error([&] { detail::accumulate(std::span<const float16>(h7), std::span(f9), p); }, "accumulate");
  expect_size_error([&] { detail::accumulate(std::span<const bfloat16>(b7), std::span(f9), p); }, "accumulate");
  expect_size_error([&] { detail::add_rounded(std::span<const float16>(h7), std::span(h9), p); }, "add_rounded");
  expect_size_error([&] { detail::add_rounded(std::span<const bfloat16>(b7), std::span(b9), p); }, "add_rounded");
  // The public functions check too.
  expect_size_error([&] { convert(std::span<const float>(f7), std::span(h9)); }, "convert");
  expect_size_error([&] { accumulate(std::span<const bfloat16>(b7), std::span(f9)); }, "accumulate");
  expect_size_error([&] { add_rounded(std::span<const float16>(h7), std::span(h9)); }, "add_rounded");
}

TEST_P(ConvertTest, EmptySpansAreFine) {
  const SimdPath p = path();
  EXPECT_NO_THROW(detail::convert(std::span<const float>(), std::span<float16>(), p));
  EXPECT_NO_THROW(detail::convert(std::span<const bfloat16>(), std::span<float>(), p));
  EXPECT_NO_THROW(detail::accumulate(std::span<const float16>(), std::span<float>(), p));
  EXPECT_NO_THROW(detail::add_rounded(std::span<const bfloat16>(), std::span<bfloat16>(), p));
  EXPECT_NO_THROW(detail::round_to_float16(std::span<float>(), p));
}

// ---- the public functions (best path) ---------------------------------------------------------

TEST(Convert, PublicFunctionsEqualScalarResults) {
  const std::vector<float> in = sweep_all_patterns(10007);
  std::vector<float16> h(in.size());
  std::vector<bfloat16> b(in.size());
  convert(in, std::span(h));
  convert(in, std::span(b));
  std::vector<float> back_h(in.size()), back_b(in.size());
  convert(std::span<const float16>(h), std::span(back_h));
  convert(std::span<const bfloat16>(b), std::span(back_b));
  std::vector<float> acc(in.size(), 1.0f);
  accumulate(std::span<const float16>(h), std::span(acc));
  std::vector<bfloat16> doubled = b;
  add_rounded(std::span<const bfloat16>(b), std::span(doubled));
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(h[i], to_float16(in[i]));
    ASSERT_EQ(b[i], to_bfloat16(in[i]));
    ASSERT_EQ(bits_of(back_h[i]), bits_of(to_float(h[i])));
    ASSERT_EQ(bits_of(back_b[i]), bits_of(to_float(b[i])));
    expect_sum_bits(bits_of(acc[i]), bits_of(1.0f + to_float(h[i])), i);
    const bfloat16 want = to_bfloat16(2.0f * to_float(b[i]));
    if (test::is_nan_bf16(want.bits)) {
      EXPECT_TRUE(test::is_quiet_nan_bf16(doubled[i].bits));
    } else {
      EXPECT_EQ(doubled[i], want);
    }
  }
}

}  // namespace
}  // namespace mpitrain
