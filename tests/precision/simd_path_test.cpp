#include <gtest/gtest.h>

#include <stdexcept>

#include "mpitrain/precision/simd_path.hpp"

namespace mpitrain {
namespace {

TEST(SimdPath, BestPathIsSupportedAndStable) {
  const SimdPath best = best_simd_path();
  EXPECT_TRUE(simd_path_supported(best));
  EXPECT_EQ(best_simd_path(), best);
  EXPECT_TRUE(simd_path_supported(SimdPath::portable));
  // The best path is the AVX2 one exactly when the CPU supports it.
  EXPECT_EQ(best == SimdPath::avx2_f16c, simd_path_supported(SimdPath::avx2_f16c));
  RecordProperty("best_simd_path", std::string(to_string(best)));
}

TEST(SimdPath, RequireSupportedThrowsOnlyForUnsupportedPaths) {
  EXPECT_EQ(require_supported(SimdPath::portable), SimdPath::portable);
  if (simd_path_supported(SimdPath::avx2_f16c)) {
    EXPECT_EQ(require_supported(SimdPath::avx2_f16c), SimdPath::avx2_f16c);
  } else {
    EXPECT_THROW(require_supported(SimdPath::avx2_f16c), std::invalid_argument);
  }
}

TEST(SimdPath, Names) {
  EXPECT_EQ(to_string(SimdPath::portable), "portable");
  EXPECT_EQ(to_string(SimdPath::avx2_f16c), "avx2_f16c");
}

}  // namespace
}  // namespace mpitrain
