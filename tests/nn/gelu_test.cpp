// GELU (exact erf form): torch parity and finite differences.
#include "mpitrain/nn/gelu.hpp"

#include <gtest/gtest.h>

#include "activations_common.hpp"

namespace mpitrain::nn {
namespace {

// Same formula as torch's CPU kernel in fp32 with libm's erf/exp: rtol 1e-5 covers a few
// ulp of difference between vectorised and scalar erf.
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
