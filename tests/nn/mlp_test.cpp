// make_mlp: torch names, initialisation, and 20 SGD steps against torch (golden).
#include "mpitrain/nn/mlp.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "golden_file.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/dropout.hpp"
#include "nn_test_util.hpp"

namespace mpitrain::nn {
namespace {

using testing::expect_close;

std::vector<std::string> names(Module& m) {
  std::vector<std::string> out;
  for (Parameter* p : m.parameters()) out.push_back(p->name);
  return out;
}

TEST(MakeMlp, NamesMatchTorchSequential) {
  const std::vector<std::size_t> hidden{8, 6};
  Sequential plain = make_mlp(10, hidden, 3);
  EXPECT_EQ(names(plain), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias",
                                                    "4.weight", "4.bias"}));
  EXPECT_EQ(plain.size(), 5u);
  Sequential dropped = make_mlp(10, hidden, 3, Activation::gelu, 0.2f, 7);
  EXPECT_EQ(names(dropped), (std::vector<std::string>{"0.weight", "0.bias", "3.weight",
                                                      "3.bias", "6.weight", "6.bias"}));
  EXPECT_EQ(dropped.size(), 7u);
  auto* drop = dynamic_cast<Dropout*>(&dropped[2]);
  ASSERT_NE(drop, nullptr);
  EXPECT_EQ(drop->rng().seed(), 7u);
  EXPECT_EQ(drop->rng().stream(), 3u);  // 1 + child index
  Sequential single = make_mlp(4, {}, 2);
  EXPECT_EQ(names(single), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(plain.parameters()[2]->value.shape(), (Shape{6, 8}));
}

TEST(MakeMlp, InitIsTorchDefaultAndSeeded) {
  const std::vector<std::size_t> hidden{64};
  Sequential a = make_mlp(100, hidden, 10, Activation::relu, 0.0f, 5);
  Sequential b = make_mlp(100, hidden, 10, Activation::relu, 0.0f, 5);
  Sequential c = make_mlp(100, hidden, 10, Activation::relu, 0.0f, 6);
  const Tensor& w0 = a.parameters()[0]->value;
  float lo = 0, hi = 0;
  for (float v : w0.span()) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -0.1f);  // U(-1/sqrt(100), 1/sqrt(100))
  EXPECT_LT(hi, 0.1f);
  EXPECT_GT(hi, 0.09f);
  expect_close(b.parameters()[0]->value, w0, 0.0, "same seed, same weights");
  EXPECT_NE(c.parameters()[0]->value[0], w0[0]);
  const Tensor& w2 = a.parameters()[2]->value;  // fan_in 64: bound 0.125
  for (float v : w2.span()) EXPECT_LT(std::abs(v), 0.125f);
}

TEST(MakeMlp, RejectsBadArguments) {
  const std::vector<std::size_t> hidden{0};
  EXPECT_THROW(make_mlp(4, hidden, 2), std::invalid_argument);
  EXPECT_THROW(make_mlp(4, {}, 2, Activation::relu, 1.0f), std::invalid_argument);
  EXPECT_EQ(parse_activation("gelu"), Activation::gelu);
  EXPECT_EQ(to_string(Activation::tanh), "tanh");
  EXPECT_THROW(parse_activation("swish"), std::invalid_argument);
}

// torch trained Sequential(Linear(20,32), ReLU, Linear(32,32), ReLU, Linear(32,5)) for 20
// steps of plain SGD (lr 0.1, batch 16) from stored weights on stored batches; we repeat
// it with the update w -= lr * g written inline (optimizers live elsewhere).
// Tolerances: the first step's gradients at rtol 1e-5 (one fp32 forward/backward, as for
// the single layers); per-step losses and final weights at rtol 1e-5 too: 20 steps let
// summation-order roundings compound, which measured a few 1e-7 relative here.
TEST(MakeMlp, TwentySgdStepsMatchTorch) {
  testing::GoldenFile g(testing::golden_path("mlp_sgd.h5"));
  const std::vector<std::size_t> hidden{32, 32};
  Sequential model = make_mlp(20, hidden, 5);
  const std::vector<Parameter*> params = model.parameters();
  for (Parameter* p : params) {
    const Tensor init = g.tensor("init/" + p->name);
    ASSERT_EQ(init.shape(), p->value.shape()) << p->name;
    std::copy_n(init.data(), init.numel(), p->value.data());
  }
  const Tensor xs = g.tensor("x");  // (steps, batch, 20)
  const std::vector<std::int32_t> labels = g.ints("labels");
  const Tensor losses = g.tensor("losses");
  const float lr = g.scalar("lr");
  const std::size_t steps = xs.dim(0), batch = xs.dim(1), in = xs.dim(2);
  Tensor x({batch, in});
  Tensor grad_logits;
  for (std::size_t step = 0; step < steps; ++step) {
    std::copy_n(xs.data() + step * batch * in, batch * in, x.data());
    zero_grad(params);
    const Tensor logits = model.forward(x);
    const float loss = cross_entropy(
        logits, std::span<const std::int32_t>(labels).subspan(step * batch, batch), grad_logits);
    model.backward(grad_logits);
    EXPECT_NEAR(loss, losses[step], 1e-5 * losses[step]) << "step " << step;
    if (step == 0) {
      for (Parameter* p : params) {
        expect_close(p->grad, g.tensor("step0_grad/" + p->name), 1e-5, "step 0 " + p->name);
      }
    }
    for (Parameter* p : params) {
      for (std::size_t i = 0; i < p->value.numel(); ++i) p->value[i] -= lr * p->grad[i];
    }
  }
  for (Parameter* p : params) {
    expect_close(p->value, g.tensor("final/" + p->name), 1e-5, "final " + p->name);
  }
}

}  // namespace
}  // namespace mpitrain::nn
