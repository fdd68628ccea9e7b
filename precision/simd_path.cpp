#include "mpitrain/precision/simd_path.hpp"

#include <stdexcept>
#include <string>

namespace mpitrain {

bool simd_path_supported(SimdPath path) noexcept {
  switch (path) {
    case SimdPath::portable: return true;
    case SimdPath::avx2_f16c:
#if defined(__x86_64__) || defined(__i386__)
      // libgcc's CPU model checks both the CPUID bits and that the OS saves the AVX state.
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
      return false;
#endif
  }
  return false;
}

SimdPath best_simd_path() noexcept {
  static const SimdPath best =
      simd_path_supported(SimdPath::avx2_f16c) ? SimdPath::avx2_f16c : SimdPath::portable;
  return best;
}

SimdPath require_supported(SimdPath path) {
  if (!simd_path_supported(path)) {
    throw std::invalid_argument("SimdPath " + std::string(to_string(path)) +
                                " is not supported by this CPU");
  }
  return path;
}

std::string_view to_string(SimdPath path) noexcept {
  switch (path) {
    case SimdPath::portable: return "portable";
    case SimdPath::avx2_f16c: return "avx2_f16c";
  }
  return "portable";
}

}  // namespace mpitrain
