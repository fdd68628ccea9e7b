// Initialisers: torch's fans, gains and bounds; orthogonal_ against torch on a stored sample.
#include "mpitrain/nn/init.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "golden_file.hpp"
#include "nn_test_util.hpp"

namespace mpitrain::nn {
namespace {

using testing::expect_close;

// Returns (min, max, mean, variance) of t.
std::array<double, 4> stats(const Tensor& t) {
  double lo = INFINITY, hi = -INFINITY, s = 0, s2 = 0;
  for (std::size_t i = 0; i < t.numel(); ++i) {
    lo = std::min<double>(lo, t[i]);
    hi = std::max<double>(hi, t[i]);
    s += t[i];
    s2 += static_cast<double>(t[i]) * t[i];
  }
  const double n = static_cast<double>(t.numel());
  return {lo, hi, s / n, s2 / n - (s / n) * (s / n)};
}

TEST(Init, FansAndGainsFollowTorch) {
  const Fans f = calculate_fans({16, 8, 3, 3});
  EXPECT_EQ(f.fan_in, 72u);
  EXPECT_EQ(f.fan_out, 144u);
  EXPECT_THROW(calculate_fans({5}), std::invalid_argument);
  EXPECT_FLOAT_EQ(calculate_gain(Nonlinearity::relu), std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(calculate_gain(Nonlinearity::tanh), 5.0f / 3.0f);
  EXPECT_FLOAT_EQ(calculate_gain(Nonlinearity::leaky_relu, std::sqrt(5.0f)),
                  std::sqrt(1.0f / 3.0f));
}

TEST(Init, LinearDefaultIsUniformOverOneOverSqrtFanIn) {
  // 400 x 100 weights: U(-0.1, 0.1) has variance 0.01/3; 40k samples put the sample
  // variance within about 1% (5 standard errors: 5 * sqrt(0.8/40000) relative).
  Rng rng(1);
  Tensor w({400, 100});
  Tensor b({400});
  linear_default_init(w, &b, rng);
  const auto sw = stats(w);
  EXPECT_GE(sw[0], -0.1);
  EXPECT_LT(sw[1], 0.1);
  EXPECT_GT(sw[1], 0.099);
  EXPECT_NEAR(sw[3], 0.01 / 3.0, 0.01 / 3.0 * 0.025);
  const auto sb = stats(b);
  EXPECT_GE(sb[0], -0.1);
  EXPECT_LT(sb[1], 0.1);
}

TEST(Init, XavierAndKaimingSpreads) {
  Rng rng(2);
  Tensor t({300, 200});
  xavier_uniform_(t, rng, 2.0f);
  const double bound = 2.0 * std::sqrt(6.0 / 500.0);
  auto s = stats(t);
  EXPECT_GE(s[0], -bound);
  EXPECT_LT(s[1], bound);
  EXPECT_NEAR(s[3], bound * bound / 3.0, bound * bound / 3.0 * 0.03);
  xavier_normal_(t, rng);
  s = stats(t);
  EXPECT_NEAR(s[3], 2.0 / 500.0, 2.0 / 500.0 * 0.03);
  kaiming_normal_(t, rng, 0.0f, FanMode::fan_out, Nonlinearity::relu);
  s = stats(t);
  EXPECT_NEAR(s[3], 2.0 / 300.0, 2.0 / 300.0 * 0.03);
}

// torch's orthogonal_ on the same Gaussian sample: QR is unique once diag(R) is made
// positive, so the results agree up to float rounding of two LAPACK builds; 1e-5 relative
// (with the tensor-scaled floor of expect_close).
TEST(Init, OrthogonalMatchesTorchOnTheSameSample) {
  testing::GoldenFile g(testing::golden_path("layers.h5"));
  for (const char* name : {"orthogonal_tall", "orthogonal_wide"}) {
    const Tensor sample = g.tensor(std::string(name) + "/sample");
    Tensor q(sample.shape());
    orthogonal_from_sample(q, sample, g.scalar(std::string(name) + "/gain"));
    expect_close(q, g.tensor(std::string(name) + "/q"), 1e-5, name);
  }
}

TEST(Init, OrthogonalRowsOrColumnsAreOrthonormal) {
  Rng rng(3);
  for (const Shape& shape : {Shape{6, 4}, Shape{4, 6}, Shape{2, 3, 2}}) {
    Tensor q(shape);
    orthogonal_(q, rng, 1.0f);
    const std::size_t rows = shape[0];
    const std::size_t cols = q.numel() / rows;
    // The shorter side is orthonormal: Q^T Q = I (tall) or Q Q^T = I (wide); 1e-5 absolute
    // is a few float roundings of dot products of unit vectors.
    const bool tall = rows >= cols;
    const std::size_t n = tall ? cols : rows;
    const std::size_t len = tall ? rows : cols;
    for (std::size_t a = 0; a < n; ++a) {
      for (std::size_t b = 0; b < n; ++b) {
        double dot = 0;
        for (std::size_t k = 0; k < len; ++k) {
          const float qa = tall ? q[k * cols + a] : q[a * cols + k];
          const float qb = tall ? q[k * cols + b] : q[b * cols + k];
          dot += static_cast<double>(qa) * qb;
        }
        EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << to_string(shape);
      }
    }
  }
  Tensor v({5});
  EXPECT_THROW(orthogonal_(v, rng), std::invalid_argument);
}

}  // namespace
}  // namespace mpitrain::nn
