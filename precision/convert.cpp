// Bulk float32 <-> bfloat16/float16 conversion and the fused 16-bit sums.
// Cost: one streaming pass, O(n) time, no allocation. On spans larger than the caches every
// function is bound by memory bandwidth (per element it reads 2-8 bytes and writes 2-4).
//
// Each operation has two implementations, chosen per call through a table of kernels:
// - portable: GCC/Clang vector extensions on 16-byte vectors (4 lanes), lowered by the
//   compiler to the baseline SIMD of the target (SSE2 on x86-64, NEON on AArch64). Written as
//   explicit lanes because the autovectoriser does not reliably handle these loops at -O2.
// - avx2_f16c: the same lane code on 32-byte vectors compiled for AVX2, and for float16 the
//   F16C instructions, whose rounding, subnormal, overflow and NaN results equal the scalar
//   conversions in float16.hpp bit for bit.
// Both finish the tail of a span (n mod lanes elements) with the scalar conversions.

#include "mpitrain/precision/convert.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

// Every function below that returns a 32-byte vector is always_inline (or a compiler builtin;
// std::bit_cast is not used for vectors, since at -O0 it is a real function), so its 32-byte
// instances only ever exist inlined into AVX2 functions. GCC still warns on their declarations
// that such a return would have another ABI without AVX, which therefore cannot matter here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace mpitrain {
namespace {
namespace lanes {

// ---------------------------------------------------------------------------------------------
// Lane code: N elements per vector. 16-bit values are kept in the low half of 32-bit lanes
// while they are computed on, and narrowed only for loads and stores.

template <std::size_t N>
struct Lanes {
  typedef std::uint32_t u32 __attribute__((vector_size(4 * N)));
  typedef std::int32_t i32 __attribute__((vector_size(4 * N)));
  typedef std::uint16_t u16 __attribute__((vector_size(2 * N)));
  typedef float f32 __attribute__((vector_size(4 * N)));
};

// Returns the vector stored at p (no alignment needed).
template <class V, class T>
[[gnu::always_inline]] inline V load(const T* p) noexcept {
  V v;
  std::memcpy(&v, static_cast<const void*>(p), sizeof v);
  return v;
}

template <class V, class T>
[[gnu::always_inline]] inline void store(T* p, const V& v) noexcept {
  std::memcpy(static_cast<void*>(p), &v, sizeof v);
}

// Returns the bits of `v` as type To of the same size.
template <class To, class From>
[[gnu::always_inline]] inline To as(const From& v) noexcept {
  return __builtin_bit_cast(To, v);
}

// Returns the 16-bit patterns (u16 lanes) widened to 32-bit lanes, and back.
template <std::size_t N>
[[gnu::always_inline]] inline typename Lanes<N>::u32 widen(const typename Lanes<N>::u16& v) noexcept {
  return __builtin_convertvector(v, typename Lanes<N>::u32);
}
template <std::size_t N>
[[gnu::always_inline]] inline typename Lanes<N>::u16 narrow(const typename Lanes<N>::u32& v) noexcept {
  return __builtin_convertvector(v, typename Lanes<N>::u16);
}

// The four functions below are lane-wise copies of the scalar functions in bfloat16.hpp and
// float16.hpp (see there for why each step is right); tests check them against each other.

// Returns the bfloat16 patterns nearest to the float32 patterns `u`.
template <std::size_t N>
[[gnu::always_inline]] inline typename Lanes<N>::u32 bf16_from_f32(const typename Lanes<N>::u32& u) noexcept {
  using I = typename Lanes<N>::i32;
  const auto rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const auto quiet_nan = (u >> 16) | 0x0040u;
  return (as<I>(u & 0x7fffffffu) > 0x7f800000) ? quiet_nan : rounded;
}

// Returns the float32 patterns equal to the bfloat16 patterns `b` (NaNs made quiet).
template <std::size_t N>
[[gnu::always_inline]] inline typename Lanes<N>::u32 f32_from_bf16(const typename Lanes<N>::u32& b) noexcept {
  using I = typename Lanes<N>::i32;
  const auto u = b << 16;
  return (as<I>(b & 0x7fffu) > 0x7f80) ? (u | 0x00400000u) : u;
}

// Returns the float16 patterns nearest to the float32 patterns `u`.
template <std::size_t N>
[[gnu::always_inline]] inline typename Lanes<N>::u32 f16_from_f32(const typename Lanes<N>::u32& u) noexcept {
  using U = typename Lanes<N>::u32;
  using I = typename Lanes<N>::i32;
  using F = typename Lanes<N>::f32;
  const U sign = (u >> 16) & 0x8000u;
  const U abs = u & 0x7fffffffu;
  const I iabs = as<I>(abs);  // abs < 2^31: signed compares are exact
  const I is_small = iabs < 0x38800000;
  const F small = as<F>(is_small ? abs : U{});
  const U subnormal = as<U>(small + 0.5f) - 0x3f000000u;
  const U normal = (abs + 0x0fffu + ((abs >> 13) & 1u) - (112u << 23)) >> 13;
  const U quiet_nan = 0x7e00u | ((abs >> 13) & 0x03ffu);
  U r = is_small ? subnormal : normal;
  r = (iabs >= 0x477ff000) ? U{} + 0x7c00u : r;
  r = (iabs > 0x7f800000) ? quiet_nan : r;
  return sign | r;
}

// Returns the float32 patterns equal to the float16 patterns `h` (NaNs made quiet).
template <std::size_t N>
[[gnu::always_inline]] inline typename Lanes<N>::u32 f32_from_f16(const typename Lanes<N>::u32& h) noexcept {
  using U = typename Lanes<N>::u32;
  using I = typename Lanes<N>::i32;
  using F = typename Lanes<N>::f32;
  const U sign = (h & 0x8000u) << 16;
  const U abs = h & 0x7fffu;
  const I iabs = as<I>(abs);
  const U subnormal = as<U>(__builtin_convertvector(iabs, F) * 0x1p-24f);
  const U normal = (abs << 13) + (112u << 23);
  const U special = ((abs << 13) + (224u << 23)) | ((iabs > 0x7c00) ? U{} + 0x00400000u : U{});
  const U r = (iabs < 0x0400) ? subnormal : ((iabs >= 0x7c00) ? special : normal);
  return sign | r;
}

// Loops over whole vectors, then the scalar tail. One function per operation and format,
// instantiated with N = 4 for the portable path and N = 8 inside the AVX2 functions.

template <std::size_t N>
[[gnu::always_inline]] inline void f32_to_bf16(const float* in, bfloat16* out, std::size_t n) noexcept {
  using L = Lanes<N>;
  std::size_t i = 0;
  for (; i + N <= n; i += N) store(out + i, narrow<N>(bf16_from_f32<N>(load<typename L::u32>(in + i))));
  for (; i < n; ++i) out[i] = to_bfloat16(in[i]);
}

template <std::size_t N>
[[gnu::always_inline]] inline void bf16_to_f32(const bfloat16* in, float* out, std::size_t n) noexcept {
  using L = Lanes<N>;
  std::size_t i = 0;
  for (; i + N <= n; i += N) store(out + i, f32_from_bf16<N>(widen<N>(load<typename L::u16>(in + i))));
  for (; i < n; ++i) out[i] = to_float(in[i]);
}

template <std::size_t N>
[[gnu::always_inline]] inline void f32_to_f16(const float* in, float16* out, std::size_t n) noexcept {
  using L = Lanes<N>;
  std::size_t i = 0;
  for (; i + N <= n; i += N) store(out + i, narrow<N>(f16_from_f32<N>(load<typename L::u32>(in + i))));
  for (; i < n; ++i) out[i] = to_float16(in[i]);
}

template <std::size_t N>
[[gnu::always_inline]] inline void f16_to_f32(const float16* in, float* out, std::size_t n) noexcept {
  using L = Lanes<N>;
  std::size_t i = 0;
  for (; i + N <= n; i += N) store(out + i, f32_from_f16<N>(widen<N>(load<typename L::u16>(in + i))));
  for (; i < n; ++i) out[i] = to_float(in[i]);
}

template <std::size_t N>
[[gnu::always_inline]] inline void accumulate_bf16(const bfloat16* in, float* acc, std::size_t n) noexcept {
  using L = Lanes<N>;
  using F = typename L::f32;
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    // Widened without quieting: the addition quiets a signalling NaN operand by itself.
    const F x = as<F>(widen<N>(load<typename L::u16>(in + i)) << 16);
    store(acc + i, load<F>(acc + i) + x);
  }
  for (; i < n; ++i) acc[i] += to_float(in[i]);
}

template <std::size_t N>
[[gnu::always_inline]] inline void add_rounded_bf16(const bfloat16* a, bfloat16* inout, std::size_t n) noexcept {
  using L = Lanes<N>;
  using F = typename L::f32;
  using U = typename L::u32;
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    // Widened without quieting: the addition quiets a signalling NaN operand by itself.
    const F x = as<F>(widen<N>(load<typename L::u16>(a + i)) << 16);
    const F y = as<F>(widen<N>(load<typename L::u16>(inout + i)) << 16);
    store(inout + i, narrow<N>(bf16_from_f32<N>(as<U>(x + y))));
  }
  for (; i < n; ++i) inout[i] = to_bfloat16(to_float(a[i]) + to_float(inout[i]));
}

template <std::size_t N>
[[gnu::always_inline]] inline void round_bf16(float* values, std::size_t n) noexcept {
  using U = typename Lanes<N>::u32;
  std::size_t i = 0;
  for (; i + N <= n; i += N) store(values + i, f32_from_bf16<N>(bf16_from_f32<N>(load<U>(values + i))));
  for (; i < n; ++i) values[i] = to_float(to_bfloat16(values[i]));
}

// Portable-only float16 sums (the AVX2 path uses F16C for these).

template <std::size_t N>
[[gnu::always_inline]] inline void accumulate_f16(const float16* in, float* acc, std::size_t n) noexcept {
  using L = Lanes<N>;
  using F = typename L::f32;
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const F x = as<F>(f32_from_f16<N>(widen<N>(load<typename L::u16>(in + i))));
    store(acc + i, load<F>(acc + i) + x);
  }
  for (; i < n; ++i) acc[i] += to_float(in[i]);
}

template <std::size_t N>
[[gnu::always_inline]] inline void add_rounded_f16(const float16* a, float16* inout, std::size_t n) noexcept {
  using L = Lanes<N>;
  using F = typename L::f32;
  using U = typename L::u32;
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const F x = as<F>(f32_from_f16<N>(widen<N>(load<typename L::u16>(a + i))));
    const F y = as<F>(f32_from_f16<N>(widen<N>(load<typename L::u16>(inout + i))));
    store(inout + i, narrow<N>(f16_from_f32<N>(as<U>(x + y))));
  }
  for (; i < n; ++i) inout[i] = to_float16(to_float(a[i]) + to_float(inout[i]));
}

template <std::size_t N>
[[gnu::always_inline]] inline void round_f16(float* values, std::size_t n) noexcept {
  using U = typename Lanes<N>::u32;
  std::size_t i = 0;
  for (; i + N <= n; i += N) store(values + i, f32_from_f16<N>(f16_from_f32<N>(load<U>(values + i))));
  for (; i < n; ++i) values[i] = to_float(to_float16(values[i]));
}

}  // namespace lanes

// ---------------------------------------------------------------------------------------------
// Kernel tables: one per SimdPath, filled with instances of the lane loops.

struct Kernels {
  void (*f32_to_bf16)(const float*, bfloat16*, std::size_t) noexcept;
  void (*bf16_to_f32)(const bfloat16*, float*, std::size_t) noexcept;
  void (*f32_to_f16)(const float*, float16*, std::size_t) noexcept;
  void (*f16_to_f32)(const float16*, float*, std::size_t) noexcept;
  void (*accumulate_bf16)(const bfloat16*, float*, std::size_t) noexcept;
  void (*accumulate_f16)(const float16*, float*, std::size_t) noexcept;
  void (*add_rounded_bf16)(const bfloat16*, bfloat16*, std::size_t) noexcept;
  void (*add_rounded_f16)(const float16*, float16*, std::size_t) noexcept;
  void (*round_bf16)(float*, std::size_t) noexcept;
  void (*round_f16)(float*, std::size_t) noexcept;
};

namespace portable {

constexpr std::size_t kLanes = 4;  // 16-byte vectors

void f32_to_bf16(const float* in, bfloat16* out, std::size_t n) noexcept { lanes::f32_to_bf16<kLanes>(in, out, n); }
void bf16_to_f32(const bfloat16* in, float* out, std::size_t n) noexcept { lanes::bf16_to_f32<kLanes>(in, out, n); }
void f32_to_f16(const float* in, float16* out, std::size_t n) noexcept { lanes::f32_to_f16<kLanes>(in, out, n); }
void f16_to_f32(const float16* in, float* out, std::size_t n) noexcept { lanes::f16_to_f32<kLanes>(in, out, n); }
void accumulate_bf16(const bfloat16* in, float* acc, std::size_t n) noexcept { lanes::accumulate_bf16<kLanes>(in, acc, n); }
void accumulate_f16(const float16* in, float* acc, std::size_t n) noexcept { lanes::accumulate_f16<kLanes>(in, acc, n); }
void add_rounded_bf16(const bfloat16* a, bfloat16* inout, std::size_t n) noexcept { lanes::add_rounded_bf16<kLanes>(a, inout, n); }
void add_rounded_f16(const float16* a, float16* inout, std::size_t n) noexcept { lanes::add_rounded_f16<kLanes>(a, inout, n); }
void round_bf16(float* values, std::size_t n) noexcept { lanes::round_bf16<kLanes>(values, n); }
void round_f16(float* values, std::size_t n) noexcept { lanes::round_f16<kLanes>(values, n); }

constexpr Kernels kKernels{&f32_to_bf16,     &bf16_to_f32,     &f32_to_f16,       &f16_to_f32,
                           &accumulate_bf16, &accumulate_f16,  &add_rounded_bf16, &add_rounded_f16,
                           &round_bf16,      &round_f16};

}  // namespace portable

#if defined(__x86_64__) || defined(__i386__)
namespace avx2 {

constexpr std::size_t kLanes = 8;  // 32-byte vectors

[[gnu::target("avx2,f16c")]] void f32_to_bf16(const float* in, bfloat16* out, std::size_t n) noexcept {
  lanes::f32_to_bf16<kLanes>(in, out, n);
}
[[gnu::target("avx2,f16c")]] void bf16_to_f32(const bfloat16* in, float* out, std::size_t n) noexcept {
  lanes::bf16_to_f32<kLanes>(in, out, n);
}
[[gnu::target("avx2,f16c")]] void accumulate_bf16(const bfloat16* in, float* acc, std::size_t n) noexcept {
  lanes::accumulate_bf16<kLanes>(in, acc, n);
}
// 16 values per iteration: interleaving each bfloat16 with a zero below it widens it to
// float32 in place (unpacklo/hi per 128-bit half), and packus_epi32 undoes exactly that
// interleaving, so no zero-extension or lane permutation is needed.
[[gnu::target("avx2,f16c")]] void add_rounded_bf16(const bfloat16* a, bfloat16* inout, std::size_t n) noexcept {
  using U = lanes::Lanes<kLanes>::u32;
  const __m256i zero = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const auto x = lanes::load<__m256i>(a + i);
    const auto y = lanes::load<__m256i>(inout + i);
    const __m256 low = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x)),
                                     _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, y)));
    const __m256 high = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x)),
                                      _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, y)));
    // bfloat16 patterns in 32-bit lanes, all below 2^16, so packus never saturates.
    const auto low_bits = lanes::as<__m256i>(lanes::bf16_from_f32<kLanes>(lanes::as<U>(low)));
    const auto high_bits = lanes::as<__m256i>(lanes::bf16_from_f32<kLanes>(lanes::as<U>(high)));
    lanes::store(inout + i, _mm256_packus_epi32(low_bits, high_bits));
  }
  lanes::add_rounded_bf16<kLanes>(a + i, inout + i, n - i);
}
[[gnu::target("avx2,f16c")]] void round_bf16(float* values, std::size_t n) noexcept {
  lanes::round_bf16<kLanes>(values, n);
}

// float16 with F16C: VCVTPS2PH with immediate rounding mode 0 (nearest even, independent of
// MXCSR) and VCVTPH2PS. Both quiet signalling NaNs and keep sign and top payload bits,
// exactly like the scalar code.

[[gnu::target("avx2,f16c")]] void f32_to_f16(const float* in, float16* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    lanes::store(out + i, _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = to_float16(in[i]);
}
[[gnu::target("avx2,f16c")]] void f16_to_f32(const float16* in, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(lanes::load<__m128i>(in + i)));
  for (; i < n; ++i) out[i] = to_float(in[i]);
}
[[gnu::target("avx2,f16c")]] void accumulate_f16(const float16* in, float* acc, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 x = _mm256_cvtph_ps(lanes::load<__m128i>(in + i));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), x));
  }
  for (; i < n; ++i) acc[i] += to_float(in[i]);
}
[[gnu::target("avx2,f16c")]] void add_rounded_f16(const float16* a, float16* inout, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 x = _mm256_cvtph_ps(lanes::load<__m128i>(a + i));
    const __m256 y = _mm256_cvtph_ps(lanes::load<__m128i>(inout + i));
    lanes::store(inout + i, _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) inout[i] = to_float16(to_float(a[i]) + to_float(inout[i]));
}
[[gnu::target("avx2,f16c")]] void round_f16(float* values, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(values + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(values + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) values[i] = to_float(to_float16(values[i]));
}

constexpr Kernels kKernels{&f32_to_bf16,     &bf16_to_f32,     &f32_to_f16,       &f16_to_f32,
                           &accumulate_bf16, &accumulate_f16,  &add_rounded_bf16, &add_rounded_f16,
                           &round_bf16,      &round_f16};

}  // namespace avx2
#endif

// Returns the kernels of `path`; throws std::invalid_argument when the CPU cannot run them.
const Kernels& kernels(SimdPath path) {
  switch (require_supported(path)) {
    case SimdPath::portable: return portable::kKernels;
    case SimdPath::avx2_f16c:
#if defined(__x86_64__) || defined(__i386__)
      return avx2::kKernels;
#else
      break;
#endif
  }
  return portable::kKernels;  // not reached: require_supported threw
}

void check_sizes(const char* function, const char* first, std::size_t first_size, const char* second,
                 std::size_t second_size) {
  if (first_size != second_size) {
    throw std::invalid_argument(std::string("mpitrain::") + function + ": " + first + " has " +
                                std::to_string(first_size) + " elements but " + second + " has " +
                                std::to_string(second_size));
  }
}

}  // namespace

namespace detail {

void convert(std::span<const float> in, std::span<bfloat16> out, SimdPath path) {
  check_sizes("convert", "in", in.size(), "out", out.size());
  kernels(path).f32_to_bf16(in.data(), out.data(), in.size());
}
void convert(std::span<const float> in, std::span<float16> out, SimdPath path) {
  check_sizes("convert", "in", in.size(), "out", out.size());
  kernels(path).f32_to_f16(in.data(), out.data(), in.size());
}
void convert(std::span<const bfloat16> in, std::span<float> out, SimdPath path) {
  check_sizes("convert", "in", in.size(), "out", out.size());
  kernels(path).bf16_to_f32(in.data(), out.data(), in.size());
}
void convert(std::span<const float16> in, std::span<float> out, SimdPath path) {
  check_sizes("convert", "in", in.size(), "out", out.size());
  kernels(path).f16_to_f32(in.data(), out.data(), in.size());
}
void accumulate(std::span<const bfloat16> in, std::span<float> acc, SimdPath path) {
  check_sizes("accumulate", "in", in.size(), "acc", acc.size());
  kernels(path).accumulate_bf16(in.data(), acc.data(), in.size());
}
void accumulate(std::span<const float16> in, std::span<float> acc, SimdPath path) {
  check_sizes("accumulate", "in", in.size(), "acc", acc.size());
  kernels(path).accumulate_f16(in.data(), acc.data(), in.size());
}
void add_rounded(std::span<const bfloat16> a, std::span<bfloat16> inout, SimdPath path) {
  check_sizes("add_rounded", "a", a.size(), "inout", inout.size());
  kernels(path).add_rounded_bf16(a.data(), inout.data(), a.size());
}
void add_rounded(std::span<const float16> a, std::span<float16> inout, SimdPath path) {
  check_sizes("add_rounded", "a", a.size(), "inout", inout.size());
  kernels(path).add_rounded_f16(a.data(), inout.data(), a.size());
}
void round_to_bfloat16(std::span<float> values, SimdPath path) {
  kernels(path).round_bf16(values.data(), values.size());
}
void round_to_float16(std::span<float> values, SimdPath path) {
  kernels(path).round_f16(values.data(), values.size());
}

}  // namespace detail

void convert(std::span<const float> in, std::span<bfloat16> out) { detail::convert(in, out, best_simd_path()); }
void convert(std::span<const float> in, std::span<float16> out) { detail::convert(in, out, best_simd_path()); }
void convert(std::span<const bfloat16> in, std::span<float> out) { detail::convert(in, out, best_simd_path()); }
void convert(std::span<const float16> in, std::span<float> out) { detail::convert(in, out, best_simd_path()); }
void accumulate(std::span<const bfloat16> in, std::span<float> acc) {
  detail::accumulate(in, acc, best_simd_path());
}
void accumulate(std::span<const float16> in, std::span<float> acc) {
  detail::accumulate(in, acc, best_simd_path());
}
void add_rounded(std::span<const bfloat16> a, std::span<bfloat16> inout) {
  detail::add_rounded(a, inout, best_simd_path());
}
void add_rounded(std::span<const float16> a, std::span<float16> inout) {
  detail::add_rounded(a, inout, best_simd_path());
}

}  // namespace mpitrain
