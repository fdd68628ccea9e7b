// all_finite. Cost: one read of the values, O(n); bound by memory bandwidth on large spans.
// Tests the exponent field (all ones = inf or NaN) on integer lanes, which needs no floating
// point compare and so is immune to FTZ/DAZ and to -ffast-math assumptions.

#include "mpitrain/precision/all_finite.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mpitrain {
namespace {

constexpr std::uint32_t kExponentMask = 0x7f800000u;

template <std::size_t N>
struct Lanes {
  typedef std::int32_t i32 __attribute__((vector_size(4 * N)));
};

template <std::size_t N>
[[gnu::always_inline]] inline bool all_finite_lanes(const float* values, std::size_t n) noexcept {
  using I = typename Lanes<N>::i32;
  constexpr auto kMask = static_cast<std::int32_t>(kExponentMask);
  constexpr std::size_t kBlock = 4096;  // values between early-exit checks (16 KiB)
  const std::size_t whole = n - n % N;
  std::size_t i = 0;
  while (i < whole) {
    const std::size_t end = std::min(whole, i + kBlock);
    I nonfinite{};  // lanes become all ones where an inf/NaN was seen
    for (; i < end; i += N) {
      I v;
      std::memcpy(&v, values + i, sizeof v);
      nonfinite |= (v & kMask) == kMask;
    }
    for (std::size_t lane = 0; lane < N; ++lane) {
      if (nonfinite[lane] != 0) return false;
    }
  }
  for (; i < n; ++i) {
    if ((std::bit_cast<std::uint32_t>(values[i]) & kExponentMask) == kExponentMask) return false;
  }
  return true;
}

bool all_finite_portable(const float* values, std::size_t n) noexcept {
  return all_finite_lanes<4>(values, n);
}

#if defined(__x86_64__) || defined(__i386__)
[[gnu::target("avx2")]] bool all_finite_avx2(const float* values, std::size_t n) noexcept {
  return all_finite_lanes<8>(values, n);
}
#endif

}  // namespace

namespace detail {

bool all_finite(std::span<const float> values, SimdPath path) {
  switch (require_supported(path)) {
    case SimdPath::portable: return all_finite_portable(values.data(), values.size());
    case SimdPath::avx2_f16c:
#if defined(__x86_64__) || defined(__i386__)
      return all_finite_avx2(values.data(), values.size());
#else
      break;
#endif
  }
  return all_finite_portable(values.data(), values.size());  // not reached: require_supported threw
}

}  // namespace detail

bool all_finite(std::span<const float> values) noexcept {
  // The best path is supported by definition, so this cannot throw.
  return detail::all_finite(values, best_simd_path());
}

}  // namespace mpitrain
