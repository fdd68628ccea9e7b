// What every Optimizer shares: construction checks, zero_grad, set_lr, gradients read at
// step time (rebinding), all-or-nothing step(), and no allocation in steady-state steps.

#include "mpitrain/nn/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/sgd.hpp"
#include "optim_alloc_counter.hpp"
#include "optim_golden.hpp"

namespace mpitrain::nn {
namespace {

using testing::expect_invalid_argument;
using testing::max_ulp_distance;

std::unique_ptr<Optimizer> make(const std::string& kind, std::vector<Parameter*> params) {
  if (kind == "sgd") {
    return std::make_unique<Sgd>(std::move(params),
                                 SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  }
  return std::make_unique<AdamW>(std::move(params), AdamWOptions{.amsgrad = true});
}

// Returns gradient values that differ per step and element.
float grad_value(std::size_t step, std::size_t i) {
  return std::sin(0.7f * static_cast<float>(i) + 1.3f * static_cast<float>(step));
}

class EveryOptimizer : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryOptimizer, RejectsNullAndDuplicateParameters) {
  Parameter a{"a", Tensor({2}), Tensor({2})};
  Parameter a2{"a", Tensor({3}), Tensor({3})};
  expect_invalid_argument([&] { make(GetParam(), {&a, nullptr}); }, {"parameter 1 is null"});
  expect_invalid_argument([&] { make(GetParam(), {&a, &a2}); }, {"two parameters", "'a'"});
}

TEST_P(EveryOptimizer, SetLrChecksItsArgument) {
  Parameter a{"a", Tensor({2}), Tensor({2})};
  auto opt = make(GetParam(), {&a});
  opt->set_lr(0.25);
  EXPECT_EQ(opt->lr(), 0.25);
  for (double bad : {-1e-3, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    expect_invalid_argument([&] { opt->set_lr(bad); }, {"learning rate"});
    EXPECT_EQ(opt->lr(), 0.25);
  }
  opt->set_lr(0.0);
  EXPECT_EQ(opt->lr(), 0.0);
}

TEST_P(EveryOptimizer, ZeroGradZerosGradientsInPlace) {
  std::vector<float> bucket(6, 3.0f);  // external gradient storage, as the engine's buckets
  Parameter a{"a", Tensor({2, 2}), Tensor({2, 2})};
  Parameter b{"b", Tensor({2}), Tensor({2})};
  Parameter c{"c", Tensor({3}), Tensor()};  // no gradient yet
  a.grad.fill(1.0f);
  b.rebind_grad(std::span<float>(bucket).subspan(4, 2));
  b.grad.fill(2.0f);
  auto opt = make(GetParam(), {&a, &b, &c});
  EXPECT_EQ(&opt->parameters()[1]->grad, &b.grad);
  opt->zero_grad();
  for (float v : a.grad.span()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(bucket[4], 0.0f);
  EXPECT_EQ(bucket[5], 0.0f);
  EXPECT_EQ(bucket[0], 3.0f);  // outside b's gradient
  EXPECT_TRUE(b.grad.is_view());
  EXPECT_TRUE(c.grad.empty());
}

// The engine rebinds gradients into its buckets between steps: the optimizer must read
// whatever p.grad is at step time.
TEST_P(EveryOptimizer, ReadsGradientsAtStepTime) {
  const std::size_t n = 7;
  Parameter owned{"w", Tensor({n}), Tensor({n})};
  Parameter rebound{"w", Tensor({n}), Tensor({n})};
  std::vector<float> bucket_a(n + 3), bucket_b(n + 5);
  auto opt_owned = make(GetParam(), {&owned});
  auto opt_rebound = make(GetParam(), {&rebound});
  for (std::size_t step = 0; step < 4; ++step) {
    // Alternate between two external buffers (and back to owned storage at the end).
    if (step == 1) rebound.rebind_grad(std::span<float>(bucket_a).subspan(3, n));
    if (step == 2) rebound.rebind_grad(std::span<float>(bucket_b).subspan(5, n));
    if (step == 3) rebound.grad = Tensor({n});
    for (std::size_t i = 0; i < n; ++i) {
      owned.grad[i] = grad_value(step, i);
      rebound.grad[i] = grad_value(step, i);
    }
    opt_owned->step();
    opt_rebound->step();
    EXPECT_EQ(max_ulp_distance(rebound.value.span(), owned.value.span()), 0u)
        << "after step " << step + 1;
  }
}

TEST_P(EveryOptimizer, BadGradientShapeChangesNothing) {
  Parameter a{"a", Tensor({3}), Tensor({3})};
  Parameter b{"b", Tensor({2, 2}), Tensor({4})};
  a.grad.fill(1.0f);
  auto opt = make(GetParam(), {&a, &b});
  expect_invalid_argument([&] { opt->step(); }, {"'b'", "[2, 2]", "[4]"});
  EXPECT_EQ(a.value[0], 0.0f);  // a comes first but was not updated either
  EXPECT_TRUE(opt->state_dict().tensors.empty());
}

TEST_P(EveryOptimizer, HandlesEmptyAndZeroSizedParameters) {
  auto none = make(GetParam(), {});
  EXPECT_NO_THROW(none->step());
  EXPECT_TRUE(none->state_dict().tensors.empty());
  Parameter z{"z", Tensor({0}), Tensor({0})};
  auto opt = make(GetParam(), {&z});
  EXPECT_NO_THROW(opt->step());
  EXPECT_EQ(opt->state_dict().scalars.at("z/step"), 1.0);
}

TEST_P(EveryOptimizer, StepsWithoutAllocatingAfterTheFirst) {
  Parameter a{"a", Tensor({33, 17}), Tensor({33, 17})};
  Parameter b{"b", Tensor({5}), Tensor({5})};
  auto opt = make(GetParam(), {&a, &b});
  a.grad.fill(0.5f);
  b.grad.fill(-0.25f);
  opt->step();
  // Tensor storage comes from aligned_alloc, not operator new, but state tensors are only
  // created at a parameter's first step; this catches vectors and strings in step().
  const std::size_t before = testing::operator_new_calls();
  for (int k = 0; k < 5; ++k) opt->step();
  EXPECT_EQ(testing::operator_new_calls() - before, 0u);
  EXPECT_NE(a.value[0], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, EveryOptimizer, ::testing::Values("sgd", "adamw"));

}  // namespace
}  // namespace mpitrain::nn
