// Reduction kernels: 16-bit sums and averages against the scalar conversions of precision/
// (on every bit pattern), max/min semantics (NaN, signed zeros, operand order), integer
// wrap-around and truncation, tails of every length, and out == b aliasing.

#include "mpitrain/collectives/detail/reduce_kernels.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <vector>

namespace mpitrain {
namespace {

using detail::combine_wire;
using detail::combine_wire_last;
using detail::divide_inplace;
using detail::narrow_from_f32;
using detail::reduce_inplace;
using detail::reduce_into;
using detail::sum_and_divide;
using detail::widen_to_f32;

float half_to_float(DType t, std::uint16_t h) {
  return t == DType::bf16 ? to_float(bfloat16::from_bits(h)) : to_float(float16::from_bits(h));
}
std::uint16_t float_to_half(DType t, float x) {
  return t == DType::bf16 ? to_bfloat16(x).bits : to_float16(x).bits;
}
bool is_nan(DType t, std::uint16_t h) { return std::isnan(half_to_float(t, h)); }

// Returns true when r is the expected 16-bit result: bitwise equal, or both NaN (IEEE leaves
// the payload of NaN + NaN open).
bool same16(DType t, std::uint16_t r, std::uint16_t e) {
  return r == e || (is_nan(t, r) && is_nan(t, e));
}

// Operands: every bit pattern as `a`, against a set of `b` covering zeros, subnormals, normals
// of both signs, the largest finite values, infinities and NaNs.
std::vector<std::uint16_t> second_operands(DType t) {
  std::vector<std::uint16_t> b = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00,
                                  0xbc00, 0x3f80, 0xbf80, 0x4000, 0x7bff, 0xfbff, 0x7f7f,
                                  0xff7f, 0x1234, 0x9876, 0x5555, 0xaaaa};
  if (t == DType::bf16) {
    b.insert(b.end(), {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1});
  } else {
    b.insert(b.end(), {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe01});
  }
  return b;
}

class HalfKernels : public ::testing::TestWithParam<DType> {};

TEST_P(HalfKernels, SumMatchesScalarOnEveryPattern) {
  const DType t = GetParam();
  std::vector<std::uint16_t> a(65536);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint16_t>(i);
  std::vector<std::uint16_t> b(a.size());
  std::vector<std::uint16_t> out(a.size());
  for (std::uint16_t bv : second_operands(t)) {
    std::fill(b.begin(), b.end(), bv);
    reduce_into(out.data(), a.data(), b.data(), a.size(), t, ReduceOp::sum);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::uint16_t e = float_to_half(t, half_to_float(t, a[i]) + half_to_float(t, bv));
      if (!same16(t, out[i], e)) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << to_string(t) << " b=0x" << std::hex << bv;
    // In place (inout = in + inout) gives the same results.
    std::vector<std::uint16_t> io = b;
    reduce_inplace(io.data(), a.data(), a.size(), t, ReduceOp::sum);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i) differ += !same16(t, io[i], out[i]);
    EXPECT_EQ(differ, 0u) << to_string(t) << " b=0x" << std::hex << bv;
  }
}

// Each loop (AVX-512, AVX2, scalar) on its own: the default path takes only the first this
// CPU has, so without this the others would go untested here.
TEST_P(HalfKernels, EveryInstructionSetGivesTheScalarBits) {
  using detail::HalfSumIsa;
  const DType t = GetParam();
  std::vector<std::uint16_t> a(65536 + 37);  // every pattern, then a tail off the blocks
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint16_t>(i * 40503u);
  std::vector<std::uint16_t> want(a.size()), got(a.size());
  int ran = 0;
  for (HalfSumIsa isa : {HalfSumIsa::avx512, HalfSumIsa::avx2}) {
    std::vector<std::uint16_t> probe(1);
    if (!detail::sum_and_divide_on(isa, probe.data(), a.data(), a.data(), 1, t, 1)) {
      std::cout << "this CPU lacks instruction set " << static_cast<int>(isa)
                << " (0 = AVX-512, 1 = AVX2): its loop is not checked here\n";
      continue;
    }
    ++ran;
    for (std::uint16_t bv : second_operands(t)) {
      const std::vector<std::uint16_t> b(a.size(), bv);
      for (int divisor : {1, 3}) {
        for (std::size_t n : {a.size(), std::size_t{0}, std::size_t{1}, std::size_t{31},
                              std::size_t{33}, std::size_t{47}}) {
          ASSERT_TRUE(detail::sum_and_divide_on(HalfSumIsa::scalar, want.data(), a.data(),
                                                b.data(), n, t, divisor));
          ASSERT_TRUE(detail::sum_and_divide_on(isa, got.data(), a.data(), b.data(), n, t,
                                                divisor));
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < n; ++i) wrong += !same16(t, got[i], want[i]);
          EXPECT_EQ(wrong, 0u) << to_string(t) << " isa " << static_cast<int>(isa) << " b=0x"
                               << std::hex << bv << std::dec << " n " << n << " divisor "
                               << divisor;
        }
        // In place: out == b, then out == a.
        ASSERT_TRUE(detail::sum_and_divide_on(HalfSumIsa::scalar, want.data(), a.data(),
                                              b.data(), b.size(), t, divisor));
        std::vector<std::uint16_t> io = b;
        ASSERT_TRUE(detail::sum_and_divide_on(isa, io.data(), a.data(), io.data(), io.size(), t,
                                              divisor));
        std::vector<std::uint16_t> first = a;
        ASSERT_TRUE(detail::sum_and_divide_on(isa, first.data(), first.data(), b.data(),
                                              first.size(), t, divisor));
        std::size_t differ = 0;
        for (std::size_t i = 0; i < io.size(); ++i) {
          differ += !same16(t, io[i], want[i]);
          differ += !same16(t, first[i], want[i]);
        }
        EXPECT_EQ(differ, 0u) << to_string(t) << " isa " << static_cast<int>(isa) << " in place";
      }
    }
  }
  RecordProperty("vector_loops_checked", ran);
  if (ran == 0) {
    GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2 with F16C: no vector loop to check";
  }
}

TEST_P(HalfKernels, AverageDividesInFp32BeforeTheOnlyRounding) {
  const DType t = GetParam();
  std::vector<std::uint16_t> a(65536);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint16_t>(i);
  std::vector<std::uint16_t> b(a.size(), float_to_half(t, 1.0f));
  std::vector<std::uint16_t> out(a.size());
  for (int divisor : {1, 2, 3, 7}) {
    sum_and_divide(out.data(), a.data(), b.data(), a.size(), t, divisor);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const float s = half_to_float(t, a[i]) + 1.0f;
      wrong += !same16(t, out[i], float_to_half(t, s / static_cast<float>(divisor)));
    }
    EXPECT_EQ(wrong, 0u) << to_string(t) << " divisor " << divisor;
  }
  // Where the order matters: (256 + 5) / 3 in bf16 is 87 (261 / 3 = 87 exactly), but the
  // sum rounded to bf16 first (260) would give 86.5.
  if (t == DType::bf16) {
    const std::uint16_t x = float_to_half(t, 256.0f);
    const std::uint16_t y = float_to_half(t, 5.0f);
    std::uint16_t r = 0;
    sum_and_divide(&r, &x, &y, 1, t, 3);
    EXPECT_EQ(half_to_float(t, r), 87.0f);
  }
}

TEST_P(HalfKernels, WidenAndNarrowMatchScalarConversions) {
  const DType t = GetParam();
  std::vector<std::uint16_t> h(65536);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint16_t>(i);
  std::vector<float> f(h.size());
  widen_to_f32(h.data(), f.data(), h.size(), t);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < h.size(); ++i) {
    const float e = half_to_float(t, h[i]);
    wrong += !(std::bit_cast<std::uint32_t>(f[i]) == std::bit_cast<std::uint32_t>(e) ||
               (std::isnan(f[i]) && std::isnan(e)));
  }
  EXPECT_EQ(wrong, 0u);

  // fp32 inputs spread over every exponent (a stride through the bit patterns), divided by
  // 1 and by 3.
  std::vector<float> x;
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 65521) {
    x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  }
  std::vector<std::uint16_t> out(x.size());
  for (int divisor : {1, 3}) {
    narrow_from_f32(x.data(), out.data(), x.size(), t, divisor);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      bad += !same16(t, out[i], float_to_half(t, x[i] / static_cast<float>(divisor)));
    }
    EXPECT_EQ(bad, 0u) << "divisor " << divisor;
  }
}

TEST_P(HalfKernels, MaxMinIgnoreOperandOrderAndPropagateNan) {
  const DType t = GetParam();
  const std::vector<std::uint16_t> v = second_operands(t);
  for (std::uint16_t a : v) {
    for (std::uint16_t b : v) {
      for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
        std::uint16_t ab = 0;
        std::uint16_t ba = 0;
        reduce_into(&ab, &a, &b, 1, t, op);
        reduce_into(&ba, &b, &a, 1, t, op);
        EXPECT_EQ(ab, ba) << std::hex << a << " " << b;
        const float fa = half_to_float(t, a);
        const float fb = half_to_float(t, b);
        if (std::isnan(fa) || std::isnan(fb)) {
          EXPECT_TRUE(is_nan(t, ab));
        } else if (fa == fb) {
          EXPECT_TRUE(ab == a || ab == b);
        } else {
          const float e = op == ReduceOp::max ? std::max(fa, fb) : std::min(fa, fb);
          EXPECT_EQ(half_to_float(t, ab), e);
        }
      }
    }
  }
  // Signed zeros: max prefers +0, min prefers -0.
  const std::uint16_t pz = 0x0000;
  const std::uint16_t nz = 0x8000;
  std::uint16_t r = 0;
  reduce_into(&r, &pz, &nz, 1, t, ReduceOp::max);
  EXPECT_EQ(r, pz);
  reduce_into(&r, &pz, &nz, 1, t, ReduceOp::min);
  EXPECT_EQ(r, nz);
}

// fp32 operands for the fused kernels: every exponent (a stride through the bit patterns),
// plus values that round to ties, overflow float16, and NaNs with payloads.
std::vector<float> fp32_operands() {
  std::vector<float> x = {0.0f, -0.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-11f,
                          65519.0f, 65520.0f, -70000.0f, 3.0e38f,
                          std::numeric_limits<float>::infinity(),
                          std::bit_cast<float>(0x7fa12345u), std::bit_cast<float>(0xffc00001u)};
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 16777259) {
    x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  }
  return x;
}

TEST_P(HalfKernels, CombineWireIsReduceIntoOfTheRoundedOperand) {
  // Every 16-bit pattern as the received operand, against each fp32 operand: bit for bit what
  // rounding the fp32 operand and calling reduce_into / sum_and_divide gives, except that a
  // sum of two NaNs may keep either payload (same16; max and min choose by bit pattern, so
  // they must match exactly).
  const DType t = GetParam();
  const std::size_t n = 65536;  // a multiple of 16: no scalar tail
  std::vector<std::uint16_t> recv(n);
  for (std::size_t i = 0; i < n; ++i) recv[i] = static_cast<std::uint16_t>(i);
  for (float x : fp32_operands()) {
    const std::vector<float> local(n, x);
    const std::vector<std::uint16_t> rounded(n, float_to_half(t, x));
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
      std::vector<std::uint16_t> expected(n);
      reduce_into(expected.data(), recv.data(), rounded.data(), n, t, op);
      const bool exact = op == ReduceOp::max || op == ReduceOp::min;
      auto differences = [&](const std::vector<std::uint16_t>& got) {
        std::size_t d = 0;
        for (std::size_t i = 0; i < n; ++i) {
          d += exact ? got[i] != expected[i] : !same16(t, got[i], expected[i]);
        }
        return d;
      };
      std::vector<std::uint16_t> w = recv;
      combine_wire(w.data(), local.data(), n, t, op);
      EXPECT_EQ(differences(w), 0u) << to_string(t) << " " << to_string(op) << " x=" << x;

      // The last step: avg divides (by 3), the others ignore the divisor; the fp32 output is
      // the 16-bit result widened, written over `local` or elsewhere.
      if (op == ReduceOp::avg) sum_and_divide(expected.data(), recv.data(), rounded.data(), n, t, 3);
      std::vector<float> out(n, -1.0f);
      std::vector<float> in_place = local;
      w = recv;
      combine_wire_last(w.data(), local.data(), out.data(), n, t, op, 3);
      EXPECT_EQ(differences(w), 0u) << to_string(t) << " last " << to_string(op) << " x=" << x;
      std::vector<std::uint16_t> w_in_place = recv;
      combine_wire_last(w_in_place.data(), in_place.data(), in_place.data(), n, t, op, 3);
      EXPECT_EQ(w_in_place, w);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {  // the fp32 output is this call's 16-bit result
        const std::uint32_t e = std::bit_cast<std::uint32_t>(half_to_float(t, w[i]));
        bad += std::bit_cast<std::uint32_t>(out[i]) != e;
        bad += std::bit_cast<std::uint32_t>(in_place[i]) != e;
      }
      EXPECT_EQ(bad, 0u) << to_string(t) << " last " << to_string(op) << " x=" << x;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfKernels, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(ReduceKernels, TailsOfEveryLengthAndAliasing) {
  // Lengths around the 8-, 16- and 32-lane blocks; out == a, out == b (in place) and out
  // separate; sums and averages of both 16-bit formats, and f32.
  for (std::size_t n = 0; n <= 40; ++n) {
    std::vector<float> a(n), b(n), out(n, -1.0f);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i);
      b[i] = 2.0f * static_cast<float>(i);
    }
    reduce_into(out.data(), a.data(), b.data(), n, DType::f32, ReduceOp::sum);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], 3.0f * static_cast<float>(i));
    // out == a, for every op: the output is the first operand.
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      std::vector<float> io = a;
      reduce_into(io.data(), io.data(), b.data(), n, DType::f32, op);
      for (std::size_t i = 0; i < n; ++i) {
        const float want = op == ReduceOp::sum ? 3.0f * static_cast<float>(i)
                           : op == ReduceOp::max ? b[i] : a[i];
        EXPECT_EQ(io[i], want) << to_string(op) << " n " << n;
      }
    }
    for (DType t : {DType::bf16, DType::f16}) {
      std::vector<std::uint16_t> ha(n), hb(n), hout(n, 0xffff), havg(n, 0xffff);
      for (std::size_t i = 0; i < n; ++i) {
        ha[i] = float_to_half(t, a[i]);
        hb[i] = float_to_half(t, b[i]);
      }
      reduce_into(hout.data(), ha.data(), hb.data(), n, t, ReduceOp::sum);
      sum_and_divide(havg.data(), ha.data(), hb.data(), n, t, 3);
      std::vector<std::uint16_t> first = ha, first_avg = ha;
      reduce_into(first.data(), first.data(), hb.data(), n, t, ReduceOp::sum);  // out == a
      sum_and_divide(first_avg.data(), first_avg.data(), hb.data(), n, t, 3);
      reduce_into(hb.data(), ha.data(), hb.data(), n, t, ReduceOp::sum);  // out == b
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_EQ(half_to_float(t, hout[i]), 3.0f * static_cast<float>(i)) << to_string(t) << n;
        EXPECT_EQ(half_to_float(t, havg[i]), static_cast<float>(i)) << to_string(t) << n;
        EXPECT_EQ(hb[i], hout[i]);
        EXPECT_EQ(first[i], hout[i]);
        EXPECT_EQ(first_avg[i], havg[i]);
      }
    }
  }
}

TEST(ReduceKernels, CombineWireTailsOfEveryLength) {
  // Lengths around the 16-lane blocks, in place (out == local): w = round(w + round(local)),
  // the last step (w + round(local)) / 2, with local i + 2^-12 (rounds to i in both formats).
  for (std::size_t n = 0; n <= 40; ++n) {
    for (DType t : {DType::bf16, DType::f16}) {
      std::vector<std::uint16_t> w(n), w_last(n);
      std::vector<float> local(n), out(n);
      for (std::size_t i = 0; i < n; ++i) {
        w[i] = w_last[i] = float_to_half(t, 2.0f * static_cast<float>(i));
        local[i] = out[i] = static_cast<float>(i) * (1.0f + 0x1p-12f);
      }
      combine_wire(w.data(), local.data(), n, t, ReduceOp::sum);
      combine_wire_last(w_last.data(), out.data(), out.data(), n, t, ReduceOp::avg, 2);
      for (std::size_t i = 0; i < n; ++i) {
        const float fi = static_cast<float>(i);
        EXPECT_EQ(half_to_float(t, w[i]), half_to_float(t, float_to_half(t, 3.0f * fi)))
            << to_string(t) << " n=" << n << " i=" << i;
        EXPECT_EQ(half_to_float(t, w_last[i]), half_to_float(t, float_to_half(t, 1.5f * fi)))
            << to_string(t) << " n=" << n << " i=" << i;
        EXPECT_EQ(out[i], half_to_float(t, w_last[i]));
      }
    }
  }
}

TEST(ReduceKernels, NativeTypes) {
  // Integer sums wrap around; division truncates toward zero.
  std::int32_t ia[2] = {std::numeric_limits<std::int32_t>::max(), -7};
  std::int32_t ib[2] = {1, 2};
  reduce_inplace(ib, ia, 2, DType::i32, ReduceOp::sum);
  EXPECT_EQ(ib[0], std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(ib[1], -5);
  std::int32_t q[2] = {-7, 7};
  divide_inplace(q, 2, DType::i32, 2);
  EXPECT_EQ(q[0], -3);
  EXPECT_EQ(q[1], 3);
  std::uint8_t ua[1] = {250};
  std::uint8_t ub[1] = {10};
  reduce_inplace(ub, ua, 1, DType::u8, ReduceOp::sum);
  EXPECT_EQ(ub[0], 4);
  std::int64_t la[1] = {-9};
  std::int64_t lb[1] = {2};
  std::int64_t lo[1] = {0};
  sum_and_divide(lo, la, lb, 1, DType::i64, 2);
  EXPECT_EQ(lo[0], -3);
  reduce_into(lo, la, lb, 1, DType::i64, ReduceOp::max);
  EXPECT_EQ(lo[0], 2);
  reduce_into(lo, la, lb, 1, DType::i64, ReduceOp::min);
  EXPECT_EQ(lo[0], -9);

  // Floating max/min propagate NaN from either side.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double da[2] = {nan, 1.0};
  double db[2] = {1.0, nan};
  double dout[2] = {0, 0};
  reduce_into(dout, da, db, 2, DType::f64, ReduceOp::max);
  EXPECT_TRUE(std::isnan(dout[0]));
  EXPECT_TRUE(std::isnan(dout[1]));
  float fa[1] = {-2.5f};
  float fb[1] = {4.0f};
  float fout[1] = {0};
  sum_and_divide(fout, fa, fb, 1, DType::f32, 3);
  EXPECT_EQ(fout[0], 1.5f / 3.0f);
  reduce_into(fout, fa, fb, 1, DType::f32, ReduceOp::min);
  EXPECT_EQ(fout[0], -2.5f);
}

}  // namespace
}  // namespace mpitrain
