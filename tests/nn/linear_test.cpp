// Linear: parity with torch.nn.Linear (golden), accumulation, ready order, finite
// differences, and the bf16/fp16 emulation against torch and an exact reference.
#include "mpitrain/nn/linear.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "golden_file.hpp"
#include "mpitrain/precision/precision_mode.hpp"
#include "nn_test_util.hpp"

namespace mpitrain::nn {
namespace {

using testing::copy_of;
using testing::expect_close;
using testing::GoldenFile;
using testing::golden_path;

// Returns a Linear holding the golden weight and bias of `group`.
Linear golden_linear(const GoldenFile& g, const std::string& group) {
  const Tensor w = g.tensor(group + "/weight");
  Linear lin(w.dim(1), w.dim(0));
  std::copy_n(w.data(), w.numel(), lin.weight().value.data());
  const Tensor b = g.tensor(group + "/bias");
  std::copy_n(b.data(), b.numel(), lin.bias()->value.data());
  return lin;
}

// Golden comparisons at rtol 1e-5: torch and we both run sgemm in fp32 on the same inputs,
// so differences are summation-order roundings (a few 1e-7 relative).
TEST(Linear, MatchesTorch) {
  GoldenFile g(golden_path("layers.h5"));
  for (const std::string group : {"linear", "linear3d"}) {
    Linear lin = golden_linear(g, group);
    const Tensor y = lin.forward(g.tensor(group + "/x"));
    expect_close(y, g.tensor(group + "/y"), 1e-5, group + " y");
    const Tensor dx = lin.backward(g.tensor(group + "/grad_y"));
    expect_close(dx, g.tensor(group + "/grad_x"), 1e-5, group + " grad_x");
    expect_close(lin.weight().grad, g.tensor(group + "/grad_weight"), 1e-5,
                 group + " grad_weight");
    expect_close(lin.bias()->grad, g.tensor(group + "/grad_bias"), 1e-5, group + " grad_bias");
  }
}

TEST(Linear, BackwardAccumulatesAndNotifiesBiasThenWeight) {
  GoldenFile g(golden_path("layers.h5"));
  Linear lin = golden_linear(g, "linear");
  std::vector<std::string> ready;
  lin.set_grad_ready_hook([&](Parameter& p) { ready.push_back(p.name); });
  for (int pass = 0; pass < 2; ++pass) {
    lin.forward(g.tensor("linear/x"));
    lin.backward(g.tensor("linear/grad_y"));
  }
  EXPECT_EQ(ready, (std::vector<std::string>{"bias", "weight", "bias", "weight"}));
  Tensor twice = g.tensor("linear/grad_weight");
  for (float& v : twice.span()) v *= 2.0f;
  expect_close(lin.weight().grad, twice, 1e-5, "grad_weight after two backwards");
}

TEST(Linear, SkipsTheInputGradientWhenNotRequired) {
  GoldenFile g(golden_path("layers.h5"));
  Linear lin = golden_linear(g, "linear");
  lin.set_requires_input_grad(false);
  lin.forward(g.tensor("linear/x"));
  EXPECT_TRUE(lin.backward(g.tensor("linear/grad_y")).empty());
  expect_close(lin.weight().grad, g.tensor("linear/grad_weight"), 1e-5, "grad_weight");
}

TEST(Linear, WithoutBiasHasOnlyAWeight) {
  Rng rng(5);
  Linear lin(3, 2, false, rng);
  ASSERT_EQ(lin.parameters().size(), 1u);
  EXPECT_EQ(lin.bias(), nullptr);
  const Tensor x = testing::random_tensor({4, 3}, rng);
  const Tensor y = lin.forward(x);
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t o = 0; o < 2; ++o) {
      double s = 0;
      for (std::size_t i = 0; i < 3; ++i) {
        s += static_cast<double>(x[r * 3 + i]) * lin.weight().value[o * 3 + i];
      }
      EXPECT_NEAR(y[r * 2 + o], s, 1e-6);
    }
  }
}

TEST(Linear, ZeroInputFeaturesGiveTheBias) {
  Linear lin(0, 3);  // torch: empty weight, bias bound 1/sqrt(0) taken as 0
  lin.bias()->value.fill(0.5f);
  const Tensor y = lin.forward(Tensor({2, 0}));
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  for (float v : y.span()) EXPECT_EQ(v, 0.5f);
  Tensor g({2, 3});
  g.fill(1.0f);
  EXPECT_EQ(lin.backward(g).shape(), (Shape{2, 0}));
  for (float v : lin.bias()->grad.span()) EXPECT_EQ(v, 2.0f);
}

TEST(Linear, RejectsMismatchedShapes) {
  Linear lin(4, 3);
  EXPECT_THROW(lin.backward(Tensor({2, 3})), std::logic_error);
  EXPECT_THROW(lin.forward(Tensor({2, 5})), std::invalid_argument);
  lin.forward(Tensor({2, 4}));
  EXPECT_THROW(lin.backward(Tensor({3, 3})), std::invalid_argument);
}

// L is bilinear in (x, W), so central differences have no truncation error; with h = 1e-2
// the float rounding of L (|L| ~ 10, 6e-8 relative) over 2h gives ~3e-5 absolute on
// gradients of size ~1, hence rtol 1e-3.
TEST(Linear, GradientsMatchFiniteDifferences) {
  Rng rng(11);
  Linear lin(5, 4, true, rng);
  lin.bias()->value.fill(0.3f);
  testing::check_gradients(lin, testing::random_tensor({3, 5}, rng), 1e-2f, 1e-3);
}

// Returns whether every value of t is exactly representable in format p.
bool representable(const Tensor& t, Precision p) {
  Tensor r = copy_of(t);
  round_to_precision(r.span(), p);
  for (std::size_t i = 0; i < t.numel(); ++i) {
    if (!(r[i] == t[i] || (std::isnan(r[i]) && std::isnan(t[i])))) return false;
  }
  return true;
}

struct PrecisionRun {
  Tensor y, dx, dw, db;
};

PrecisionRun run_precision(const GoldenFile& g, const std::string& group, Precision p) {
  Linear lin = golden_linear(g, group);
  lin.set_precision(p);
  PrecisionRun r;
  r.y = lin.forward(g.tensor(group + "/x"));
  r.dx = lin.backward(g.tensor(group + "/grad_y"));
  r.dw = copy_of(lin.weight().grad);
  r.db = copy_of(lin.bias()->grad);
  return r;
}

// Against the exact emulation (float64 products of rounded inputs, then rounded): ours
// accumulates in fp32, so a value whose exact result lies within fp32 error of a rounding
// boundary of the 16-bit format may land on the neighbouring value: one unit of the format
// (rtol 2^-8 for bf16, 2^-11 for fp16, with expect_close's tensor-scaled floor). Every
// value must also be exactly representable in the format (rounding really happened).
void expect_matches_emulation(const GoldenFile& g, const std::string& group, Precision p,
                              double unit) {
  const PrecisionRun r = run_precision(g, group, p);
  expect_close(r.y, g.tensor(group + "/emu_y"), unit, group + " y");
  expect_close(r.dx, g.tensor(group + "/emu_grad_x"), unit, group + " grad_x");
  expect_close(r.dw, g.tensor(group + "/emu_grad_weight"), unit, group + " grad_weight");
  expect_close(r.db, g.tensor(group + "/emu_grad_bias"), unit, group + " grad_bias");
  for (const Tensor* t : {&r.y, &r.dx, &r.dw, &r.db}) {
    EXPECT_TRUE(representable(*t, p)) << group << ": a value is not on the 16-bit grid";
  }
}

TEST(Linear, Bf16MatchesEmulationAndTorch) {
  GoldenFile g(golden_path("layers.h5"));
  expect_matches_emulation(g, "linear_bf16", Precision::bf16, 0x1.0p-8);
  const PrecisionRun r = run_precision(g, "linear_bf16", Precision::bf16);
  // torch 1.13's CPU bf16 forward (addmm) accumulates in fp32 like us: one bf16 unit.
  expect_close(r.y, g.tensor("linear_bf16/torch_y"), 0x1.0p-8, "torch bf16 y");
  expect_close(r.db, g.tensor("linear_bf16/torch_grad_bias"), 0x1.0p-8, "torch bf16 grad_bias");
  // Its backward GEMMs (transposed operands) round every product and every partial sum to
  // bf16 (verified: sequential bf16 accumulation reproduces torch bit for bit), which no
  // GPU does; on this data that costs up to 1.3% (grad_x) and 1.7% (grad_weight) of the
  // tensor's largest value, so these two are compared at rtol 0.03.
  expect_close(r.dx, g.tensor("linear_bf16/torch_grad_x"), 0.03, "torch bf16 grad_x");
  expect_close(r.dw, g.tensor("linear_bf16/torch_grad_weight"), 0.03, "torch bf16 grad_weight");
}

TEST(Linear, Fp16MatchesEmulationIncludingOverflowToInf) {
  GoldenFile g(golden_path("layers.h5"));
  expect_matches_emulation(g, "linear_fp16", Precision::fp16, 0x1.0p-11);
  expect_matches_emulation(g, "linear_fp16_overflow", Precision::fp16, 0x1.0p-11);
  const PrecisionRun r = run_precision(g, "linear_fp16_overflow", Precision::fp16);
  const auto infs = std::count_if(r.y.span().begin(), r.y.span().end(),
                                  [](float v) { return std::isinf(v); });
  EXPECT_GT(infs, 0) << "outputs beyond 65520 must become inf in fp16";
}

TEST(Linear, Fp16GradientsOverflowToInfLikeAnUnscaledGpuRun) {
  Linear lin(1, 1);
  lin.weight().value[0] = 1.0f;
  lin.bias()->value[0] = 0.0f;
  lin.set_precision(Precision::fp16);
  Tensor x({1, 1});
  x[0] = 300.0f;
  lin.forward(x);
  Tensor g({1, 1});
  g[0] = 300.0f;  // dW = 300 * 300 = 90000 > 65520: inf in fp16, then inf in the fp32 grad
  const Tensor dx = lin.backward(g);
  EXPECT_TRUE(std::isinf(lin.weight().grad[0]));
  EXPECT_EQ(lin.bias()->grad[0], 300.0f);
  EXPECT_EQ(dx[0], 300.0f);
}

TEST(Linear, MixedPrecisionKeepsMasterWeightsAndAccumulatesInFp32) {
  Rng rng(3);
  Linear lin(4, 3, true, rng);
  const Tensor master = copy_of(lin.weight().value);
  lin.set_precision(Precision::bf16);
  lin.forward(testing::random_tensor({2, 4}, rng));
  lin.weight().grad.fill(1.0f + 0x1.0p-20f);  // not representable in bf16
  lin.backward(testing::random_tensor({2, 3}, rng));
  expect_close(lin.weight().value, master, 0.0, "master weights untouched");
  EXPECT_FALSE(representable(lin.weight().grad, Precision::bf16))
      << "the fp32 gradient accumulator must not be rounded";
}

}  // namespace
}  // namespace mpitrain::nn
