// Tanh: torch parity and finite differences.
#include "mpitrain/nn/tanh.hpp"

#include <gtest/gtest.h>

#include "activations_common.hpp"

namespace mpitrain::nn {
namespace {

// tanh_fast (within 3 ulp) vs torch's vectorised tanh (within about 1 ulp): rtol 1e-5.
TEST(Tanh, MatchesTorch) {
  Tanh tanh_layer;
  testing::expect_layer_matches_torch(tanh_layer, "tanh", 1e-5);
}

// h = 1e-2: truncation h^2/6 * |f'''| <= 3.4e-5 (|tanh'''| <= 2), rounding ~1e-5; rtol 1e-3.
TEST(Tanh, GradientMatchesFiniteDifferences) {
  Rng rng(23);
  Tanh tanh_layer;
  testing::check_gradients(tanh_layer, testing::random_tensor({4, 5}, rng, -2.0f, 2.0f), 1e-2f,
                           1e-3);
}

}  // namespace
}  // namespace mpitrain::nn
