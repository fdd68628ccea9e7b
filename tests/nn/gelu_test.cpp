// GELU (exact erf form): torch parity and finite differences.
#include "mpitrain/nn/gelu.hpp"

#include <gtest/gtest.h>

#include "activations_common.hpp"

namespace mpitrain::nn {
namespace {

// Same formula and the same erf approximation (A&S 7.1.26) as torch's vectorised CPU
// kernel; the exp inside differs (Sleef vs Cephes, each within 2 ulp), so results differ by
// a few ulp: rtol 1e-5.
TEST(GELU, MatchesTorch) {
  GELU gelu;
  testing::expect_layer_matches_torch(gelu, "gelu", 1e-5);
}

// h = 1e-2: truncation h^2/6 * |f'''| <= 2e-5 with |f'''| < 1.2, rounding ~1e-5; rtol 1e-3.
TEST(GELU, GradientMatchesFiniteDifferences) {
  Rng rng(22);
  GELU gelu;
  testing::check_gradients(gelu, testing::random_tensor({4, 5}, rng, -3.0f, 3.0f), 1e-2f, 1e-3);
}

}  // namespace
}  // namespace mpitrain::nn
