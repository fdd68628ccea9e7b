// Element-wise reduction kernels (see reduce_kernels.hpp). Cost: one memory-bound pass per
// call; per element one fp32 add (16-bit formats: plus two widenings and one rounding).
#include "mpitrain/collectives/detail/reduce_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "mpitrain/precision/convert.hpp"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define MPITRAIN_HAVE_AVX2_PATH 1
#endif

// Every exported kernel is cloned for x86-64-v3 (AVX2, F16C, FMA) and baseline x86-64; the
// loader picks the clone for the running CPU (GNU ifunc). The element helpers are forced
// inline so that each clone vectorizes them with its own instruction set.
// Not under ThreadSanitizer (make sanitize-tsan): the loader runs the clones' resolver
// before TSan's runtime starts, and the instrumented resolver crashes the program.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define MPITRAIN_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MPITRAIN_KERNEL
#endif
#define MPITRAIN_INLINE [[gnu::always_inline]] inline

namespace mpitrain::detail {
namespace {

// ---- 16-bit formats: storage <-> fp32 -------------------------------------------------------
// The scalar conversions of precision/ are inline and branch-free, so loops over them vectorize.

struct Bf16 {
  MPITRAIN_INLINE static float load(std::uint16_t h) noexcept {
    return to_float(bfloat16::from_bits(h));
  }
  MPITRAIN_INLINE static std::uint16_t store(float x) noexcept { return to_bfloat16(x).bits; }
};

struct Fp16 {
  MPITRAIN_INLINE static float load(std::uint16_t h) noexcept {
    return to_float(float16::from_bits(h));
  }
  MPITRAIN_INLINE static std::uint16_t store(float x) noexcept { return to_float16(x).bits; }
};

// ---- explicit AVX2/F16C kernels for the hot 16-bit paths --------------------------------
// GCC does not turn the scalar f16 conversions into F16C instructions, and the bf16 rounding
// vectorizes poorly, so the sums, the averaging step and the divided narrowing have
// hand-written 8-lane versions (16 lanes per store where the packing allows). They give
// results bit-identical to the scalar helpers above (same round-to-nearest-even, NaN stays a
// quiet NaN); the loops finish with a scalar tail.
#ifdef MPITRAIN_HAVE_AVX2_PATH
#define MPITRAIN_AVX2 __attribute__((target("avx2,f16c,fma")))

bool cpu_has_avx2_f16c() noexcept {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

struct Bf16x8 {
  using Scalar = Bf16;
  MPITRAIN_AVX2 static __m256 load(const std::uint16_t* p) noexcept {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // Returns the bf16 patterns (in the low halves of 32-bit lanes) nearest to x.
  MPITRAIN_AVX2 static __m256i round(__m256 x) noexcept {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  }
  MPITRAIN_AVX2 static void store(std::uint16_t* p, __m256 x) noexcept {
    const __m256i bits = round(x);
    // Pack the eight 32-bit lanes (each <= 0xffff) into eight 16-bit values, in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  // Returns round(x) for x computed from bf16 operands by +, - or / (a sum or an average):
  // such an x that is NaN has zero low 16 bits and its quiet bit set (x86 quiets NaNs, and
  // the payload comes from a bf16 operand or is the default NaN), so plain rounding already
  // gives the quiet NaN that round() selects, and the NaN test can go.
  MPITRAIN_AVX2 static __m256i round_sum(__m256 x) noexcept {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb),
                             16);
  }
  // Stores 16 sums or averages of bf16 values: lo to p[0..8), hi to p[8..16), one pack.
  MPITRAIN_AVX2 static void store2(std::uint16_t* p, __m256 lo, __m256 hi) noexcept {
    const __m256i packed =
        _mm256_permute4x64_epi64(_mm256_packus_epi32(round_sum(lo), round_sum(hi)), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
  }
  // Returns float(round(x)): x rounded to bf16 (NaN quieted, as round()), widened back.
  MPITRAIN_AVX2 static __m256 round_widen(__m256 x) noexcept {
    return _mm256_castsi256_ps(_mm256_slli_epi32(round(x), 16));
  }
  // Stores 16 sums or averages of bf16 values as store2 does, and their fp32 values (exact)
  // to f[0..16).
  MPITRAIN_AVX2 static void store2_widen(std::uint16_t* p, float* f, __m256 lo, __m256 hi) noexcept {
    const __m256i bl = round_sum(lo);
    const __m256i bh = round_sum(hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm256_permute4x64_epi64(_mm256_packus_epi32(bl, bh), 0xd8));
    _mm256_storeu_ps(f, _mm256_castsi256_ps(_mm256_slli_epi32(bl, 16)));
    _mm256_storeu_ps(f + 8, _mm256_castsi256_ps(_mm256_slli_epi32(bh, 16)));
  }
};

struct Fp16x8 {
  using Scalar = Fp16;
  MPITRAIN_AVX2 static __m256 load(const std::uint16_t* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  MPITRAIN_AVX2 static void store(std::uint16_t* p, __m256 x) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Stores 16 values: lo to p[0..8), hi to p[8..16).
  MPITRAIN_AVX2 static void store2(std::uint16_t* p, __m256 lo, __m256 hi) noexcept {
    store(p, lo);
    store(p + 8, hi);
  }
  // Returns float(round(x)): x rounded to f16, widened back.
  MPITRAIN_AVX2 static __m256 round_widen(__m256 x) noexcept {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Stores 16 values as store2 does, and their fp32 values (exact) to f[0..16).
  MPITRAIN_AVX2 static void store2_widen(std::uint16_t* p, float* f, __m256 lo, __m256 hi) noexcept {
    const __m128i hl = _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i hh = _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), hl);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), hh);
    _mm256_storeu_ps(f, _mm256_cvtph_ps(hl));
    _mm256_storeu_ps(f + 8, _mm256_cvtph_ps(hh));
  }
};

// out[i] = round((a[i] + b[i]) / divisor); divisor 1 skips the division. out may equal a or
// b: each block of 16 (or 8) lanes is loaded before it is stored.
template <class V>
MPITRAIN_AVX2 void avx_sum(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b,
                           std::size_t n, int divisor) noexcept {
  using F = typename V::Scalar;
  std::size_t i = 0;
  if (divisor == 1) {
    for (; i + 16 <= n; i += 16) {
      const __m256 lo = _mm256_add_ps(V::load(a + i), V::load(b + i));
      const __m256 hi = _mm256_add_ps(V::load(a + i + 8), V::load(b + i + 8));
      V::store2(out + i, lo, hi);
    }
    for (; i + 8 <= n; i += 8) V::store(out + i, _mm256_add_ps(V::load(a + i), V::load(b + i)));
    for (; i < n; ++i) out[i] = F::store(F::load(a[i]) + F::load(b[i]));
  } else {
    const float d = static_cast<float>(divisor);
    const __m256 dv = _mm256_set1_ps(d);
    for (; i + 16 <= n; i += 16) {
      const __m256 lo = _mm256_div_ps(_mm256_add_ps(V::load(a + i), V::load(b + i)), dv);
      const __m256 hi = _mm256_div_ps(_mm256_add_ps(V::load(a + i + 8), V::load(b + i + 8)), dv);
      V::store2(out + i, lo, hi);
    }
    for (; i + 8 <= n; i += 8) {
      V::store(out + i, _mm256_div_ps(_mm256_add_ps(V::load(a + i), V::load(b + i)), dv));
    }
    for (; i < n; ++i) out[i] = F::store((F::load(a[i]) + F::load(b[i])) / d);
  }
}

// ---- AVX-512 versions of the 16-bit sums and averages ------------------------------------
// Twice the lanes of the AVX2 loop: about half its time in cache (512K bf16 elements on this
// project's AMD EPYC VM, 2026-11-28: 31 us against 57 us), which is what a 16-bit allreduce
// spends beyond its copies. Timed on that CPU only: on CPUs that lower a core's clock while
// it runs 512-bit code, the AVX2 loop may be the faster one there. The same rounding as
// Bf16x8::round_sum and the same F16C conversion, so the results are bit-identical.
// (AVX512_BF16's vcvtne2ps2bf16 would round in one instruction but flushes subnormals to
// zero, which the scalar conversion does not.)
#define MPITRAIN_AVX512 __attribute__((target("avx2,f16c,fma,avx512f,avx512bw")))
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialised variable),
// which -Wmaybe-uninitialized reports wherever they are inlined; those lanes are overwritten.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

bool cpu_has_avx512bw() noexcept {
  return cpu_has_avx2_f16c() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw");
}

struct Bf16x16 {
  using Narrow = Bf16x8;
  MPITRAIN_AVX512 static __m512 load(const std::uint16_t* p) noexcept {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  // Stores 16 sums or averages of bf16 values (see Bf16x8::round_sum for why NaNs need no test).
  MPITRAIN_AVX512 static void store(std::uint16_t* p, __m512 x) noexcept {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rounded));
  }
};

struct Fp16x16 {
  using Narrow = Fp16x8;
  MPITRAIN_AVX512 static __m512 load(const std::uint16_t* p) noexcept {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  MPITRAIN_AVX512 static void store(std::uint16_t* p, __m512 x) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// avx_sum with 16 lanes per vector, two vectors per step; the last < 32 elements go to the
// AVX2 loop. out may equal a or b, as in avx_sum.
template <class V>
MPITRAIN_AVX512 void avx512_sum(std::uint16_t* out, const std::uint16_t* a,
                                const std::uint16_t* b, std::size_t n, int divisor) noexcept {
  std::size_t i = 0;
  if (divisor == 1) {
    for (; i + 32 <= n; i += 32) {
      const __m512 lo = _mm512_add_ps(V::load(a + i), V::load(b + i));
      const __m512 hi = _mm512_add_ps(V::load(a + i + 16), V::load(b + i + 16));
      V::store(out + i, lo);
      V::store(out + i + 16, hi);
    }
  } else {
    const __m512 dv = _mm512_set1_ps(static_cast<float>(divisor));
    for (; i + 32 <= n; i += 32) {
      const __m512 lo = _mm512_div_ps(_mm512_add_ps(V::load(a + i), V::load(b + i)), dv);
      const __m512 hi = _mm512_div_ps(_mm512_add_ps(V::load(a + i + 16), V::load(b + i + 16)), dv);
      V::store(out + i, lo);
      V::store(out + i + 16, hi);
    }
  }
  avx_sum<typename V::Narrow>(out + i, a + i, b + i, n - i, divisor);
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <class V>
MPITRAIN_AVX2 void avx_narrow(const float* src, std::uint16_t* dst, std::size_t n,
                              int divisor) noexcept {
  const float d = static_cast<float>(divisor);
  const __m256 dv = _mm256_set1_ps(d);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) V::store(dst + i, _mm256_div_ps(_mm256_loadu_ps(src + i), dv));
  for (; i < n; ++i) dst[i] = V::Scalar::store(src[i] / d);
}

// w[i] = round((w[i] + round(local[i])) / divisor) (Divide) or round(w[i] + round(local[i]));
// with Widen also out[i] = float(w[i]). out may equal local: each block of 16 lanes is loaded
// before it is stored.
template <class V, bool Divide, bool Widen>
MPITRAIN_AVX2 void avx_combine_wire(std::uint16_t* w, const float* local, float* out,
                                    std::size_t n, int divisor) noexcept {
  using F = typename V::Scalar;
  const float d = static_cast<float>(divisor);
  const __m256 dv = _mm256_set1_ps(d);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 lo = _mm256_add_ps(V::load(w + i), V::round_widen(_mm256_loadu_ps(local + i)));
    __m256 hi = _mm256_add_ps(V::load(w + i + 8), V::round_widen(_mm256_loadu_ps(local + i + 8)));
    if constexpr (Divide) {
      lo = _mm256_div_ps(lo, dv);
      hi = _mm256_div_ps(hi, dv);
    }
    if constexpr (Widen) {
      V::store2_widen(w + i, out + i, lo, hi);
    } else {
      V::store2(w + i, lo, hi);
    }
  }
  for (; i < n; ++i) {
    float x = F::load(w[i]) + F::load(F::store(local[i]));
    if constexpr (Divide) x /= d;
    w[i] = F::store(x);
    if constexpr (Widen) out[i] = F::load(w[i]);
  }
}

// Returns true when it handled the fused 16-bit sum/average (the CPU has AVX2 and F16C).
// out == nullptr: a middle step (no fp32 output).
bool fast_combine_wire(void* wire, const float* local, float* out, std::size_t n, DType type,
                       int divisor) noexcept {
  if (!cpu_has_avx2_f16c()) return false;
  auto* w = static_cast<std::uint16_t*>(wire);
  const bool bf = type == DType::bf16;
  if (out == nullptr) {
    if (bf) avx_combine_wire<Bf16x8, false, false>(w, local, out, n, divisor);
    else avx_combine_wire<Fp16x8, false, false>(w, local, out, n, divisor);
  } else if (divisor == 1) {
    if (bf) avx_combine_wire<Bf16x8, false, true>(w, local, out, n, divisor);
    else avx_combine_wire<Fp16x8, false, true>(w, local, out, n, divisor);
  } else {
    if (bf) avx_combine_wire<Bf16x8, true, true>(w, local, out, n, divisor);
    else avx_combine_wire<Fp16x8, true, true>(w, local, out, n, divisor);
  }
  return true;
}

// Returns true when it handled the 16-bit sum/average on `isa` (the CPU has it).
bool half_sum_on(HalfSumIsa isa, void* out, const void* a, const void* b, std::size_t n,
                 DType type, int divisor) noexcept {
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  const bool bf = type == DType::bf16;
  switch (isa) {
    case HalfSumIsa::avx512:
      if (!cpu_has_avx512bw()) return false;
      if (bf) avx512_sum<Bf16x16>(o, x, y, n, divisor);
      else avx512_sum<Fp16x16>(o, x, y, n, divisor);
      return true;
    case HalfSumIsa::avx2:
      if (!cpu_has_avx2_f16c()) return false;
      if (bf) avx_sum<Bf16x8>(o, x, y, n, divisor);
      else avx_sum<Fp16x8>(o, x, y, n, divisor);
      return true;
    case HalfSumIsa::scalar: return false;
  }
  return false;
}

bool fast_narrow(const float* src, void* dst, std::size_t n, DType type, int divisor) noexcept {
  if (!cpu_has_avx2_f16c()) return false;
  auto* d = static_cast<std::uint16_t*>(dst);
  if (type == DType::bf16) avx_narrow<Bf16x8>(src, d, n, divisor);
  else avx_narrow<Fp16x8>(src, d, n, divisor);
  return true;
}
#else
bool half_sum_on(HalfSumIsa, void*, const void*, const void*, std::size_t, DType,
                 int) noexcept {
  return false;
}
bool fast_combine_wire(void*, const float*, float*, std::size_t, DType, int) noexcept {
  return false;
}
bool fast_narrow(const float*, void*, std::size_t, DType, int) noexcept { return false; }
#endif

// Returns true when it handled the 16-bit sum/average (the CPU has AVX-512 or AVX2 and F16C).
bool fast_half_sum(void* out, const void* a, const void* b, std::size_t n, DType type,
                   int divisor) noexcept {
  return half_sum_on(HalfSumIsa::avx512, out, a, b, n, type, divisor) ||
         half_sum_on(HalfSumIsa::avx2, out, a, b, n, type, divisor);
}

// ---- element operations -----------------------------------------------------------------

template <class T> MPITRAIN_INLINE T add(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap around instead of signed-overflow UB
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class T> MPITRAIN_INLINE T max_of(T a, T b) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a || b != b) return a + b;  // NaN propagates
  }
  return a < b ? b : a;
}
template <class T> MPITRAIN_INLINE T min_of(T a, T b) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a || b != b) return a + b;
  }
  return b < a ? b : a;
}

// 16-bit max/min compare in fp32; ties (+0/-0) and two NaNs resolve by bit pattern so that the
// result does not depend on the order of the operands.
template <class F> MPITRAIN_INLINE std::uint16_t max16(std::uint16_t a, std::uint16_t b) noexcept {
  const float fa = F::load(a);
  const float fb = F::load(b);
  const bool nan_a = fa != fa;
  const bool nan_b = fb != fb;
  if (nan_a || nan_b) return nan_a && nan_b ? (a > b ? a : b) : (nan_a ? a : b);
  if (fa != fb) return fa > fb ? a : b;
  return (a & 0x8000u) ? b : a;  // equal values: prefer +0
}
template <class F> MPITRAIN_INLINE std::uint16_t min16(std::uint16_t a, std::uint16_t b) noexcept {
  const float fa = F::load(a);
  const float fb = F::load(b);
  const bool nan_a = fa != fa;
  const bool nan_b = fb != fb;
  if (nan_a || nan_b) return nan_a && nan_b ? (a > b ? a : b) : (nan_a ? a : b);
  if (fa != fb) return fa < fb ? a : b;
  return (a & 0x8000u) ? a : b;  // equal values: prefer -0
}

template <class S, class Op>
MPITRAIN_INLINE void loop_io(S* __restrict io, const S* __restrict in, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) io[i] = op(in[i], io[i]);
}
// io[i] = op(io[i], in[i]): the output is the first operand.
template <class S, class Op>
MPITRAIN_INLINE void loop_first(S* __restrict io, const S* __restrict in, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) io[i] = op(io[i], in[i]);
}
template <class S, class Op>
MPITRAIN_INLINE void loop_out(S* __restrict out, const S* __restrict a, const S* __restrict b,
                              std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
}
// out[i] = op(a[i], b[i]) where out is a or b exactly, or disjoint from both.
template <class S, class Op>
MPITRAIN_INLINE void binary(void* out, const void* a, const void* b, std::size_t n, Op op) {
  if (out == b) {
    loop_io(static_cast<S*>(out), static_cast<const S*>(a), n, op);
  } else if (out == a) {
    loop_first(static_cast<S*>(out), static_cast<const S*>(b), n, op);
  } else {
    loop_out(static_cast<S*>(out), static_cast<const S*>(a), static_cast<const S*>(b), n, op);
  }
}

template <class T>
MPITRAIN_INLINE void native_reduce(void* out, const void* a, const void* b, std::size_t n,
                                   ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: binary<T>(out, a, b, n, [](T x, T y) { return add(x, y); }); return;
    case ReduceOp::max: binary<T>(out, a, b, n, [](T x, T y) { return max_of(x, y); }); return;
    case ReduceOp::min: binary<T>(out, a, b, n, [](T x, T y) { return min_of(x, y); }); return;
  }
}

template <class F>
MPITRAIN_INLINE void half_reduce(void* out, const void* a, const void* b, std::size_t n,
                                 ReduceOp op) {
  using S = std::uint16_t;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      binary<S>(out, a, b, n, [](S x, S y) { return F::store(F::load(x) + F::load(y)); });
      return;
    case ReduceOp::max: binary<S>(out, a, b, n, [](S x, S y) { return max16<F>(x, y); }); return;
    case ReduceOp::min: binary<S>(out, a, b, n, [](S x, S y) { return min16<F>(x, y); }); return;
  }
}

MPITRAIN_INLINE void reduce_any(void* out, const void* a, const void* b, std::size_t n,
                                DType type, ReduceOp op) {
  switch (type) {
    case DType::f32: native_reduce<float>(out, a, b, n, op); return;
    case DType::f64: native_reduce<double>(out, a, b, n, op); return;
    case DType::i32: native_reduce<std::int32_t>(out, a, b, n, op); return;
    case DType::i64: native_reduce<std::int64_t>(out, a, b, n, op); return;
    case DType::u8: native_reduce<std::uint8_t>(out, a, b, n, op); return;
    case DType::bf16: half_reduce<Bf16>(out, a, b, n, op); return;
    case DType::f16: half_reduce<Fp16>(out, a, b, n, op); return;
  }
}

template <class T>
MPITRAIN_INLINE void native_sum_divide(void* out, const void* a, const void* b, std::size_t n,
                                       int divisor) {
  const T d = static_cast<T>(divisor);
  binary<T>(out, a, b, n, [d](T x, T y) { return static_cast<T>(add(x, y) / d); });
}

template <class F>
MPITRAIN_INLINE void half_sum_divide(void* out, const void* a, const void* b, std::size_t n,
                                     int divisor) {
  using S = std::uint16_t;
  const float d = static_cast<float>(divisor);
  binary<S>(out, a, b, n, [d](S x, S y) { return F::store((F::load(x) + F::load(y)) / d); });
}

template <class T>
MPITRAIN_INLINE void native_divide(void* data, std::size_t n, int divisor) {
  T* p = static_cast<T*>(data);
  const T d = static_cast<T>(divisor);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / d);
}

template <class F> MPITRAIN_INLINE void half_divide(void* data, std::size_t n, int divisor) {
  auto* p = static_cast<std::uint16_t*>(data);
  const float d = static_cast<float>(divisor);
  for (std::size_t i = 0; i < n; ++i) p[i] = F::store(F::load(p[i]) / d);
}

template <class F>
MPITRAIN_INLINE void half_narrow(const float* __restrict src, void* dst, std::size_t n,
                                 int divisor) {
  auto* __restrict d = static_cast<std::uint16_t*>(dst);
  const float div = static_cast<float>(divisor);
  for (std::size_t i = 0; i < n; ++i) d[i] = F::store(src[i] / div);
}

constexpr bool is_half(DType type) noexcept { return type == DType::bf16 || type == DType::f16; }
constexpr bool is_half_sum(DType type, ReduceOp op) noexcept {
  return is_half(type) && (op == ReduceOp::sum || op == ReduceOp::avg);
}

}  // namespace

MPITRAIN_KERNEL void reduce_inplace(void* inout, const void* in, std::size_t count, DType type,
                                    ReduceOp op) noexcept {
  if (is_half_sum(type, op) && fast_half_sum(inout, in, inout, count, type, 1)) return;
  reduce_any(inout, in, inout, count, type, op);
}

MPITRAIN_KERNEL void reduce_into(void* out, const void* a, const void* b, std::size_t count,
                                 DType type, ReduceOp op) noexcept {
  if (is_half_sum(type, op) && fast_half_sum(out, a, b, count, type, 1)) return;
  reduce_any(out, a, b, count, type, op);
}

MPITRAIN_KERNEL void sum_and_divide(void* out, const void* a, const void* b, std::size_t count,
                                    DType type, int divisor) noexcept {
  if (is_half(type) && fast_half_sum(out, a, b, count, type, divisor)) return;
  switch (type) {
    case DType::f32: native_sum_divide<float>(out, a, b, count, divisor); return;
    case DType::f64: native_sum_divide<double>(out, a, b, count, divisor); return;
    case DType::i32: native_sum_divide<std::int32_t>(out, a, b, count, divisor); return;
    case DType::i64: native_sum_divide<std::int64_t>(out, a, b, count, divisor); return;
    case DType::u8: native_sum_divide<std::uint8_t>(out, a, b, count, divisor); return;
    case DType::bf16: half_sum_divide<Bf16>(out, a, b, count, divisor); return;
    case DType::f16: half_sum_divide<Fp16>(out, a, b, count, divisor); return;
  }
}

MPITRAIN_KERNEL bool sum_and_divide_on(HalfSumIsa isa, void* out, const void* a, const void* b,
                                       std::size_t count, DType type, int divisor) noexcept {
  if (!is_half(type)) return false;
  if (isa != HalfSumIsa::scalar) return half_sum_on(isa, out, a, b, count, type, divisor);
  if (type == DType::bf16) half_sum_divide<Bf16>(out, a, b, count, divisor);
  else half_sum_divide<Fp16>(out, a, b, count, divisor);
  return true;
}

MPITRAIN_KERNEL void divide_inplace(void* data, std::size_t count, DType type,
                                    int divisor) noexcept {
  switch (type) {
    case DType::f32: native_divide<float>(data, count, divisor); return;
    case DType::f64: native_divide<double>(data, count, divisor); return;
    case DType::i32: native_divide<std::int32_t>(data, count, divisor); return;
    case DType::i64: native_divide<std::int64_t>(data, count, divisor); return;
    case DType::u8: native_divide<std::uint8_t>(data, count, divisor); return;
    case DType::bf16: half_divide<Bf16>(data, count, divisor); return;
    case DType::f16: half_divide<Fp16>(data, count, divisor); return;
  }
}

void widen_to_f32(const void* src, float* dst, std::size_t count, DType type) noexcept {
  if (type == DType::bf16) {
    convert(std::span<const bfloat16>(static_cast<const bfloat16*>(src), count),
            std::span<float>(dst, count));
  } else if (type == DType::f16) {
    convert(std::span<const float16>(static_cast<const float16*>(src), count),
            std::span<float>(dst, count));
  }
}

MPITRAIN_KERNEL void narrow_from_f32(const float* src, void* dst, std::size_t count, DType type,
                                     int divisor) noexcept {
  if (divisor == 1 && type == DType::bf16) {
    convert(std::span<const float>(src, count),
            std::span<bfloat16>(static_cast<bfloat16*>(dst), count));
    return;
  }
  if (divisor == 1 && type == DType::f16) {
    convert(std::span<const float>(src, count), std::span<float16>(static_cast<float16*>(dst), count));
    return;
  }
  if (is_half(type) && fast_narrow(src, dst, count, type, divisor)) return;
  if (type == DType::bf16) half_narrow<Bf16>(src, dst, count, divisor);
  if (type == DType::f16) half_narrow<Fp16>(src, dst, count, divisor);
}

// The fused steps on any CPU and for every op: the local operand is rounded into a small
// 16-bit block, and the kernels above combine the block as ring_allreduce.cpp combines a
// received segment with its local one (out = received (op) local).
namespace {
void combine_wire_blocks(void* wire, const float* local, float* out, std::size_t count,
                         DType type, ReduceOp op, int divisor) noexcept {
  constexpr std::size_t kBlock = 1024;  // 2 KiB of 16-bit values: stays in L1
  std::uint16_t block[kBlock];
  auto* w = static_cast<std::uint16_t*>(wire);
  for (std::size_t off = 0; off < count; off += kBlock) {
    const std::size_t len = std::min(kBlock, count - off);
    narrow_from_f32(local + off, block, len, type, 1);
    if (out != nullptr && op == ReduceOp::avg) {
      sum_and_divide(block, w + off, block, len, type, divisor);
    } else {
      reduce_into(block, w + off, block, len, type, op);
    }
    std::memcpy(w + off, block, len * sizeof(std::uint16_t));
    if (out != nullptr) widen_to_f32(block, out + off, len, type);
  }
}
}  // namespace

void combine_wire(void* wire, const float* local, std::size_t count, DType type,
                  ReduceOp op) noexcept {
  if (is_half_sum(type, op) && fast_combine_wire(wire, local, nullptr, count, type, 1)) return;
  combine_wire_blocks(wire, local, nullptr, count, type, op, 1);
}

void combine_wire_last(void* wire, const float* local, float* out, std::size_t count, DType type,
                       ReduceOp op, int divisor) noexcept {
  const int d = op == ReduceOp::avg ? divisor : 1;
  if (is_half_sum(type, op) && fast_combine_wire(wire, local, out, count, type, d)) return;
  combine_wire_blocks(wire, local, out, count, type, op, d);
}

}  // namespace mpitrain::detail
