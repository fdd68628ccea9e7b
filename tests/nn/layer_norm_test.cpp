// LayerNorm: torch parity (affine, 3-d input), ready order, finite differences, bf16.
#include "mpitrain/nn/layer_norm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "golden_file.hpp"
#include "nn_test_util.hpp"

namespace mpitrain::nn {
namespace {

using testing::expect_close;

LayerNorm golden_layer_norm(const testing::GoldenFile& g) {
  LayerNorm ln(16);
  const Tensor w = g.tensor("layer_norm/weight");
  const Tensor b = g.tensor("layer_norm/bias");
  std::copy_n(w.data(), w.numel(), ln.weight().value.data());
  std::copy_n(b.data(), b.numel(), ln.bias().value.data());
  return ln;
}

// Statistics in double vs torch's fp32 row moments: differences of a few fp32 roundings,
// inside rtol 1e-5.
TEST(LayerNorm, MatchesTorch) {
  testing::GoldenFile g(testing::golden_path("layers.h5"));
  LayerNorm ln = golden_layer_norm(g);
  std::vector<std::string> ready;
  ln.set_grad_ready_hook([&](Parameter& p) { ready.push_back(p.name); });
  expect_close(ln.forward(g.tensor("layer_norm/x")), g.tensor("layer_norm/y"), 1e-5, "y");
  expect_close(ln.backward(g.tensor("layer_norm/grad_y")), g.tensor("layer_norm/grad_x"), 1e-5,
               "grad_x");
  expect_close(ln.weight().grad, g.tensor("layer_norm/grad_weight"), 1e-5, "grad_weight");
  expect_close(ln.bias().grad, g.tensor("layer_norm/grad_bias"), 1e-5, "grad_bias");
  EXPECT_EQ(ready, (std::vector<std::string>{"bias", "weight"}));
}

TEST(LayerNorm, DefaultsAreIdentityAffineWithoutParametersWhenDisabled) {
  LayerNorm ln(4);
  EXPECT_EQ(ln.parameters().size(), 2u);
  EXPECT_EQ(ln.weight().value[3], 1.0f);
  EXPECT_EQ(ln.bias().value[3], 0.0f);
  LayerNorm plain(4, 1e-5f, false);
  EXPECT_TRUE(plain.parameters().empty());
  Tensor x({1, 4});
  for (std::size_t i = 0; i < 4; ++i) x[i] = static_cast<float>(i);  // mean 1.5, var 1.25
  const Tensor y = plain.forward(x);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(y[i], (static_cast<double>(i) - 1.5) / std::sqrt(1.25 + 1e-5), 1e-6);
  }
  EXPECT_THROW(plain.forward(Tensor({2, 5})), std::invalid_argument);
}

// h = 1e-2 on inputs of spread ~1 (variance ~1/3): the normalisation's curvature gives
// truncation errors ~1e-4 relative; rtol 2e-3.
TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  Rng rng(25);
  LayerNorm ln(6);
  rng.fill_uniform(ln.weight().value.span(), 0.5f, 1.5f);
  rng.fill_uniform(ln.bias().value.span(), -0.5f, 0.5f);
  testing::check_gradients(ln, testing::random_tensor({3, 6}, rng), 1e-2f, 2e-3);
}

TEST(LayerNorm, RoundsOutputUnderBf16) {
  Rng rng(26);
  LayerNorm ln(8);
  ln.set_precision(Precision::bf16);
  const Tensor y = ln.forward(testing::random_tensor({2, 8}, rng));
  Tensor r = testing::copy_of(y);
  round_to_precision(r.span(), Precision::bf16);
  expect_close(y, r, 0.0, "output on the bf16 grid");
}

}  // namespace
}  // namespace mpitrain::nn
