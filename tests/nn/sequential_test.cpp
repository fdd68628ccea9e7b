// Sequential: torch state_dict names, reverse ready order, propagation of mode, precision,
// hook and input-gradient flag, and equality with chaining the children by hand.
#include "mpitrain/nn/sequential.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/nn/dropout.hpp"
#include "mpitrain/nn/layer_norm.hpp"
#include "mpitrain/nn/linear.hpp"
#include "mpitrain/nn/relu.hpp"
#include "nn_test_util.hpp"

namespace mpitrain::nn {
namespace {

using testing::copy_of;
using testing::expect_close;

std::vector<std::string> names(Module& m) {
  std::vector<std::string> out;
  for (Parameter* p : m.parameters()) out.push_back(p->name);
  return out;
}

// Returns Sequential(Linear(3,4), ReLU, Sequential(Linear(4,4), LayerNorm(4)), Linear(4,2)),
// with the hook (if any) installed before the last two children are added.
Sequential nested(Rng& rng, GradReadyHook hook = {}) {
  Sequential inner;
  inner.emplace<Linear>(4, 4, true, rng);
  inner.emplace<LayerNorm>(4);
  Sequential outer;
  if (hook) outer.set_grad_ready_hook(std::move(hook));
  outer.emplace<Linear>(3, 4, true, rng);
  outer.emplace<ReLU>();
  outer.add(std::make_unique<Sequential>(std::move(inner)));
  outer.emplace<Linear>(4, 2, true, rng);
  return outer;
}

TEST(Sequential, NamesFollowTorchStateDict) {
  Rng rng(1);
  Sequential model = nested(rng);
  EXPECT_EQ(names(model),
            (std::vector<std::string>{"0.weight", "0.bias", "2.0.weight", "2.0.bias",
                                      "2.1.weight", "2.1.bias", "3.weight", "3.bias"}));
  EXPECT_EQ(model.size(), 4u);
  EXPECT_THROW(model[4], std::out_of_range);
  EXPECT_THROW(model.add(nullptr), std::invalid_argument);
}

TEST(Sequential, HookSeesTheReverseOfParameters) {
  Rng rng(2);
  std::vector<std::string> ready;
  Sequential model = nested(rng, [&](Parameter& p) { ready.push_back(p.name); });
  model.forward(testing::random_tensor({5, 3}, rng));
  model.backward(testing::random_tensor({5, 2}, rng));
  std::vector<std::string> expected = names(model);
  std::reverse(expected.begin(), expected.end());
  EXPECT_EQ(ready, expected);
}

TEST(Sequential, EqualsChainingTheChildren) {
  Rng rng(3);
  Sequential model = nested(rng);
  const Tensor x = testing::random_tensor({5, 3}, rng);
  const Tensor g = testing::random_tensor({5, 2}, rng);
  const Tensor y = model.forward(x);
  const Tensor dx = model.backward(g);
  std::vector<Tensor> grads;
  for (Parameter* p : model.parameters()) grads.push_back(copy_of(p->grad));

  zero_grad(model.parameters());
  Tensor h = model[0].forward(x);
  h = model[1].forward(h);
  h = model[2].forward(h);
  h = model[3].forward(h);
  expect_close(y, h, 0.0, "forward");
  Tensor d = model[3].backward(g);
  d = model[2].backward(d);
  d = model[1].backward(d);
  d = model[0].backward(d);
  expect_close(dx, d, 0.0, "input gradient");
  const std::vector<Parameter*> params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    expect_close(params[i]->grad, grads[i], 0.0, params[i]->name);
  }
}

TEST(Sequential, IntoVariantsReuseTheCallersBuffersAndMatch) {
  Rng rng(6);
  Sequential model = nested(rng);
  const Tensor x = testing::random_tensor({5, 3}, rng);
  const Tensor g = testing::random_tensor({5, 2}, rng);
  const Tensor y = model.forward(x);
  zero_grad(model.parameters());
  const Tensor dx = model.backward(g);
  Tensor out({5, 2});
  Tensor grad_in({5, 3});
  const float* out_storage = out.data();
  const float* grad_storage = grad_in.data();
  for (int pass = 0; pass < 2; ++pass) {
    zero_grad(model.parameters());
    model.forward_into(x, out);
    model.backward_into(g, grad_in);
  }
  EXPECT_EQ(out.data(), out_storage);
  EXPECT_EQ(grad_in.data(), grad_storage);
  expect_close(out, y, 0.0, "forward_into");
  expect_close(grad_in, dx, 0.0, "backward_into");
}

TEST(Sequential, PropagatesModePrecisionAndInputGradientFlag) {
  Rng rng(4);
  Sequential model;
  model.train(false);
  model.set_precision(Precision::fp16);
  model.emplace<Linear>(3, 3, true, rng);
  auto& drop = model.emplace<Dropout>(0.5f);
  EXPECT_FALSE(drop.is_training());
  EXPECT_EQ(drop.precision(), Precision::fp16);
  model.train(true);
  model.set_precision(Precision::bf16);
  EXPECT_TRUE(model[0].is_training());
  EXPECT_EQ(model[0].precision(), Precision::bf16);

  model.set_requires_input_grad(false);
  EXPECT_FALSE(model[0].requires_input_grad());
  EXPECT_TRUE(model[1].requires_input_grad());
  model.forward(testing::random_tensor({2, 3}, rng));
  EXPECT_TRUE(model.backward(testing::random_tensor({2, 3}, rng)).empty());
}

// random_streams() names each Dropout by its module path, nested paths joined by dots, and
// hands out the layer's own stream (restoring it restores the masks).
TEST(Sequential, RandomStreamsAreNamedByModulePath) {
  Sequential model;
  model.emplace<Linear>(3, 3);
  auto& first = model.emplace<Dropout>(0.5f, 7, 1);
  auto inner = std::make_unique<Sequential>();
  inner->emplace<ReLU>();
  auto& second = inner->emplace<Dropout>(0.25f, 7, 2);
  model.add(std::move(inner));
  const auto streams = model.random_streams();
  ASSERT_EQ(streams.size(), 2u);
  EXPECT_EQ(streams[0].first, "1");
  EXPECT_EQ(streams[0].second, &first.rng());
  EXPECT_EQ(streams[1].first, "2.1");
  EXPECT_EQ(streams[1].second, &second.rng());
  EXPECT_TRUE(Linear(2, 2).random_streams().empty());
}

// The whole nested model against central differences (piecewise smooth; inputs chosen by
// seed, h = 1e-2 does not cross a ReLU kink here); rtol 2e-3 as for LayerNorm.
TEST(Sequential, GradientsMatchFiniteDifferences) {
  Rng rng(5);
  Sequential model = nested(rng);
  testing::check_gradients(model, testing::random_tensor({3, 3}, rng), 1e-2f, 2e-3);
}

}  // namespace
}  // namespace mpitrain::nn
