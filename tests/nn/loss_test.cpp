// cross_entropy and mse_loss: torch parity, stability, errors, finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "golden_file.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/mse_loss.hpp"
#include "nn_test_util.hpp"

namespace mpitrain::nn {
namespace {

using testing::expect_close;

// Checks `grad` against central differences of loss(x) in x, step h; rtol `tol`.
void check_loss_gradient(const std::function<float(const Tensor&)>& loss, const Tensor& x,
                         const Tensor& grad, float h, double tol) {
  Tensor xv = testing::copy_of(x);
  Tensor numeric(x.shape());
  for (std::size_t i = 0; i < x.numel(); ++i) {
    const float saved = xv[i];
    xv[i] = saved + h;
    const double plus = loss(xv);
    xv[i] = saved - h;
    const double minus = loss(xv);
    xv[i] = saved;
    numeric[i] = static_cast<float>((plus - minus) / (2.0 * h));
  }
  expect_close(grad, numeric, tol, "loss gradient vs central differences");
}

// Same max-shifted log-sum-exp as torch in fp32 (our batch mean in double): rtol 1e-5.
TEST(CrossEntropy, MatchesTorchIncludingHugeLogits) {
  testing::GoldenFile g(testing::golden_path("layers.h5"));
  const Tensor logits = g.tensor("cross_entropy/logits");
  const std::vector<std::int32_t> labels = g.ints("cross_entropy/labels");
  const LossResult r = cross_entropy(logits, labels);
  EXPECT_NEAR(r.loss, g.scalar("cross_entropy/loss"), 1e-5 * g.scalar("cross_entropy/loss"));
  expect_close(r.grad, g.tensor("cross_entropy/grad_logits"), 1e-5, "grad_logits");
  for (float v : r.grad.span()) EXPECT_TRUE(std::isfinite(v));
}

TEST(CrossEntropy, ClosedFormForUniformLogits) {
  Tensor logits({2, 4});  // all zero: loss = log 4, grad = (1/4 - onehot) / 2
  const std::vector<std::int32_t> labels{1, 3};
  Tensor grad;
  const float loss = cross_entropy(logits, labels, grad);
  EXPECT_FLOAT_EQ(loss, std::log(4.0f));
  EXPECT_FLOAT_EQ(grad[0], 0.125f);
  EXPECT_FLOAT_EQ(grad[1], -0.375f);
  EXPECT_FLOAT_EQ(grad[7], -0.375f);
}

TEST(CrossEntropy, RejectsBadLabelsAndShapes) {
  Tensor logits({2, 3});
  EXPECT_THROW(cross_entropy(logits, std::vector<std::int32_t>{0, 3}), std::invalid_argument);
  EXPECT_THROW(cross_entropy(logits, std::vector<std::int32_t>{-1, 0}), std::invalid_argument);
  EXPECT_THROW(cross_entropy(logits, std::vector<std::int32_t>{0}), std::invalid_argument);
  EXPECT_TRUE(std::isnan(cross_entropy(Tensor({0, 3}), {}).loss));
}

// h = 1e-2 on logits in [-2, 2]: truncation h^2/6 * |f'''| ~ 1e-6 per unit, float rounding
// of the loss (~1e-7) over 2h ~ 1e-5 against gradients of size ~0.1; rtol 1e-3.
TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  Rng rng(31);
  const Tensor logits = testing::random_tensor({4, 5}, rng, -2.0f, 2.0f);
  const std::vector<std::int32_t> labels{0, 4, 2, 2};
  const LossResult r = cross_entropy(logits, labels);
  check_loss_gradient([&](const Tensor& x) { return cross_entropy(x, labels).loss; }, logits,
                      r.grad, 1e-2f, 1e-3);
}

// mean((p - t)^2) in double vs torch's fp32 mean: rtol 1e-5.
TEST(MseLoss, MatchesTorch) {
  testing::GoldenFile g(testing::golden_path("layers.h5"));
  const LossResult r = mse_loss(g.tensor("mse/prediction"), g.tensor("mse/target"));
  EXPECT_NEAR(r.loss, g.scalar("mse/loss"), 1e-5 * g.scalar("mse/loss"));
  expect_close(r.grad, g.tensor("mse/grad_prediction"), 1e-5, "grad_prediction");
}

// Quadratic: central differences are exact up to rounding (~1e-6 over 2h); rtol 1e-3.
TEST(MseLoss, GradientMatchesFiniteDifferencesAndRejectsMismatch) {
  Rng rng(32);
  const Tensor p = testing::random_tensor({3, 4}, rng);
  const Tensor t = testing::random_tensor({3, 4}, rng);
  const LossResult r = mse_loss(p, t);
  check_loss_gradient([&](const Tensor& x) { return mse_loss(x, t).loss; }, p, r.grad, 1e-2f,
                      1e-3);
  EXPECT_THROW(mse_loss(p, Tensor({4, 3})), std::invalid_argument);
}

}  // namespace
}  // namespace mpitrain::nn
