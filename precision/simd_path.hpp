#pragma once
// SimdPath: the instruction-set variant of the bulk numeric kernels (convert.hpp,
// all_finite.hpp). The library picks the best variant the CPU supports at run time, so one
// binary runs everywhere; every variant gives bit-identical results, and tests and
// benchmarks may ask for a specific one to check that.

#include <cstdint>
#include <string_view>

namespace mpitrain {

enum class SimdPath : std::uint8_t {
  portable,   // plain C++ loops written so that the compiler vectorises them (baseline ISA)
  avx2_f16c,  // x86-64 AVX2 for the integer and float work, F16C for float16 <-> float32
};

// Returns true when this CPU (and OS) can run kernels of `path`.
bool simd_path_supported(SimdPath path) noexcept;
// Returns the fastest path this CPU supports (decided once per process).
SimdPath best_simd_path() noexcept;
// Returns `path`; throws std::invalid_argument naming it when this CPU cannot run it.
SimdPath require_supported(SimdPath path);
// Returns "portable" or "avx2_f16c".
std::string_view to_string(SimdPath path) noexcept;

}  // namespace mpitrain
