#pragma once
// fast_math: branch-free float exp, tanh and erf that the compiler vectorises, for the
// elementwise layers (libm's scalar calls cost 10-15 ns per value).
//
// Each function is a fixed sequence of adds, multiplies, at most one division, and integer
// operations on bit patterns. Tests compare bit patterns as integers and choices blend bit
// patterns with masks: under the default -ftrapping-math GCC moves a float operation whose
// result feeds only one side of ?: into a conditional block, which it then will not
// vectorise (the operation might raise an FP exception); integer blends keep every
// operation unconditional.
//   exp_fast:  Cephes expf (range reduction by ln 2 in two parts, degree-6 polynomial),
//              within 2 ulp of exp on [-87.3, 88.7]; 0 below (no subnormal results), inf
//              above; NaN stays NaN.
//   tanh_fast: Cephes tanhf (odd polynomial for |x| < 0.625, else 1 - 2 / (exp(2|x|) + 1)),
//              within 3 ulp; +-1 beyond |x| = 9.01 as in float; NaN stays NaN.
//   erf_as:    Abramowitz & Stegun 7.1.26 (absolute error 1.5e-7 in exact arithmetic,
//              6e-7 in float), the approximation torch's vectorised CPU GELU kernels use.

#include <bit>
#include <cstdint>

namespace mpitrain::nn {
namespace fast_math_detail {

inline std::int32_t bits(float x) noexcept { return std::bit_cast<std::int32_t>(x); }
inline float from_bits(std::int32_t b) noexcept { return std::bit_cast<float>(b); }
// Returns a when mask is all ones, b when it is zero (mask = -int(condition)).
inline float blend(std::int32_t mask, float a, float b) noexcept {
  return from_bits((bits(a) & mask) | (bits(b) & ~mask));
}
// Returns all ones if c, else zero.
inline std::int32_t mask_of(bool c) noexcept { return -static_cast<std::int32_t>(c); }
constexpr std::int32_t kAbsMask = 0x7fffffff;
constexpr std::int32_t kSignMask = static_cast<std::int32_t>(0x80000000u);
constexpr std::int32_t kInfBits = 0x7f800000;

}  // namespace fast_math_detail

// Returns e^x (see the header comment for accuracy and range).
inline float exp_fast(float x) noexcept {
  using namespace fast_math_detail;
  constexpr float kMax = 88.72283935546875f;   // above: inf
  constexpr float kMin = -87.33654022216797f;  // below: 0
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi exact in 9 bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const std::int32_t ix = bits(x);
  const std::int32_t ax = ix & kAbsMask;
  const std::int32_t nan = mask_of(ax > kInfBits);
  const std::int32_t over = mask_of(ix >= 0) & mask_of(ax > bits(kMax));
  const std::int32_t under = mask_of(ix < 0) & mask_of(ax > (bits(kMin) & kAbsMask));
  const float xc = blend(under, kMin, blend(over, kMax, x));
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;  // round(x / ln 2)
  const std::int32_t ni = bits(t) - bits(kRound);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln2 / 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // p * 2^n, n in [-126, 128], as two normal powers of two 2^(n>>1) * 2^(n - (n>>1)).
  const std::int32_t half = ni >> 1;
  const float y = p * from_bits((half + 127) << 23) * from_bits((ni - half + 127) << 23);
  return blend(nan, x, blend(under, 0.0f, blend(over, from_bits(kInfBits), y)));
}

// Returns tanh(x) (see the header comment).
inline float tanh_fast(float x) noexcept {
  using namespace fast_math_detail;
  const std::int32_t ix = bits(x);
  const std::int32_t ax = ix & kAbsMask;
  const std::int32_t nan = mask_of(ax > kInfBits);
  const std::int32_t is_small = mask_of(ax < bits(0.625f));
  const std::int32_t saturated = mask_of(ax > bits(10.0f));
  // Small |x|: x + x^3 P(x^2).
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  // Large |x|: 1 - 2 / (e^(2|x|) + 1) with the sign of x, |x| capped at 10 (tanh is 1 in
  // float there).
  const float ac = blend(saturated, 10.0f, from_bits(ax));
  const float big_abs = 1.0f - 2.0f / (exp_fast(ac + ac) + 1.0f);
  const float big = from_bits(bits(big_abs) | (ix & kSignMask));
  return blend(nan, x, blend(is_small, small, big));
}

// Returns erf(x) by Abramowitz & Stegun 7.1.26 (see the header comment).
inline float erf_as(float x) noexcept {
  using namespace fast_math_detail;
  const std::int32_t ix = bits(x);
  const std::int32_t ax = ix & kAbsMask;
  const std::int32_t nan = mask_of(ax > kInfBits);
  const float a = from_bits(ax);
  const float t = 1.0f / (0.3275911f * a + 1.0f);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float e = 1.0f - p * t * exp_fast(-a * a);  // >= 0
  return blend(nan, x, from_bits(bits(e) | (ix & kSignMask)));
}

}  // namespace mpitrain::nn
