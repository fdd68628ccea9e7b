// Sgd against torch.optim.SGD 1.13 (golden data from golden/make_optim_golden.py): values
// and state must agree bit for bit (0 ulp), and state dicts must resume runs exactly.

#include "mpitrain/nn/sgd.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "optim_golden.hpp"

namespace mpitrain::nn {
namespace {

using testing::expect_golden_run;
using testing::expect_invalid_argument;
using testing::expect_resumes_exactly;
using testing::expect_same_state;
using testing::GoldenRun;
using testing::make_params;
using testing::OptimGoldenFile;
using testing::pointers;
using testing::read_run;
using testing::set_grads;

SgdOptions recorded_options(const OptimGoldenFile& file, const std::string& group) {
  return {.lr = file.attribute(group, "lr"),
          .momentum = file.attribute(group, "momentum"),
          .dampening = file.attribute(group, "dampening"),
          .weight_decay = file.attribute(group, "weight_decay"),
          .nesterov = file.attribute(group, "nesterov") != 0.0,
          .maximize = file.attribute(group, "maximize") != 0.0};
}

class SgdGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(SgdGolden, MatchesTorchBitForBit) {
  const OptimGoldenFile file(testing::optim_golden_path());
  const GoldenRun run = read_run(file, "sgd/" + GetParam());
  std::vector<Parameter> params = make_params(run);
  Sgd opt(pointers(params), recorded_options(file, run.group));
  expect_golden_run(file, run, params, opt, {"momentum_buffer"});
}

TEST_P(SgdGolden, StateDictResumesExactly) {
  const OptimGoldenFile file(testing::optim_golden_path());
  const GoldenRun run = read_run(file, "sgd/" + GetParam());
  const SgdOptions options = recorded_options(file, run.group);
  auto make = [&](std::vector<Parameter*> ps) -> std::unique_ptr<Optimizer> {
    return std::make_unique<Sgd>(std::move(ps), options);
  };
  // 0: before any state exists; 1: right after the buffers appear (0.bias still has none in
  // the runs with missing gradients); 5: in the middle.
  for (std::size_t k : {0u, 1u, 5u}) expect_resumes_exactly(run, make, k);
}

INSTANTIATE_TEST_SUITE_P(Torch113, SgdGolden,
                         ::testing::Values("plain", "momentum", "dampening", "nesterov",
                                           "weight_decay", "all"));

TEST(Sgd, DefaultsAreTorchs) {
  const SgdOptions o;
  EXPECT_TRUE(std::isnan(o.lr));  // torch: lr is required
  EXPECT_EQ(o.momentum, 0.0);
  EXPECT_EQ(o.dampening, 0.0);
  EXPECT_EQ(o.weight_decay, 0.0);
  EXPECT_FALSE(o.nesterov);
  EXPECT_FALSE(o.maximize);
}

TEST(Sgd, RejectsWhatTorchRejects) {
  Parameter p{"w", Tensor({2}), Tensor({2})};
  expect_invalid_argument([&] { Sgd({&p}, SgdOptions{}); }, {"lr must be set"});
  expect_invalid_argument([&] { Sgd({&p}, {.lr = -0.1}); }, {"learning rate"});
  expect_invalid_argument([&] { Sgd({&p}, {.lr = 0.1, .momentum = -0.5}); }, {"momentum"});
  expect_invalid_argument([&] { Sgd({&p}, {.lr = 0.1, .weight_decay = -1.0}); },
                          {"weight_decay"});
  expect_invalid_argument([&] { Sgd({&p}, {.lr = 0.1, .nesterov = true}); },
                          {"Nesterov momentum requires a momentum and zero dampening"});
  expect_invalid_argument(
      [&] { Sgd({&p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
      {"Nesterov momentum requires a momentum and zero dampening"});
  EXPECT_NO_THROW(Sgd({&p}, {.lr = 0.0, .momentum = 0.9, .nesterov = true}));
}

TEST(Sgd, MomentumBufferIsCreatedLazily) {
  Parameter a{"a", Tensor({2, 3}), Tensor({2, 3})};
  Parameter b{"b", Tensor({4}), Tensor()};  // no gradient: skipped, like .grad None
  Sgd opt({&a, &b}, {.lr = 0.5, .momentum = 0.9});
  StateDict s = opt.state_dict();
  EXPECT_TRUE(s.tensors.empty());
  EXPECT_EQ(s.scalars.at("a/step"), 0.0);
  EXPECT_EQ(s.scalars.at("b/step"), 0.0);

  a.grad.fill(2.0f);
  opt.step();
  s = opt.state_dict();
  ASSERT_EQ(s.tensors.size(), 1u);
  // torch: the first buffer is a copy of the gradient.
  EXPECT_EQ(s.tensors.at("a/momentum_buffer").shape(), (Shape{2, 3}));
  EXPECT_EQ(s.tensors.at("a/momentum_buffer")[5], 2.0f);
  EXPECT_EQ(s.scalars.at("a/step"), 1.0);
  EXPECT_EQ(s.scalars.at("b/step"), 0.0);
  EXPECT_EQ(a.value[0], -1.0f);  // 0 - 0.5 * 2
  EXPECT_EQ(b.value[0], 0.0f);
}

TEST(Sgd, WithoutMomentumHasNoBuffers) {
  Parameter a{"a", Tensor({3}), Tensor({3})};
  Sgd opt({&a}, {.lr = 0.25});
  a.grad.fill(1.0f);
  opt.step();
  opt.step();
  const StateDict s = opt.state_dict();
  EXPECT_TRUE(s.tensors.empty());
  EXPECT_EQ(s.scalars.at("a/step"), 2.0);
  EXPECT_EQ(a.value[2], -0.5f);
}

TEST(Sgd, OptionsReportTheCurrentLr) {
  Parameter a{"a", Tensor({1}), Tensor({1})};
  Sgd opt({&a}, {.lr = 0.1, .momentum = 0.5});
  opt.set_lr(0.025);
  EXPECT_EQ(opt.options().lr, 0.025);
  EXPECT_EQ(opt.options().momentum, 0.5);
  EXPECT_EQ(opt.kind(), "sgd");
}

// A state after 3 steps of the "momentum" run, where 0.bias missed its first gradient.
class SgdLoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    const OptimGoldenFile file(testing::optim_golden_path());
    run_ = read_run(file, "sgd/momentum");
    options_ = recorded_options(file, run_.group);
    source_params_ = make_params(run_);
    Sgd source(pointers(source_params_), options_);
    for (std::size_t step = 0; step < 3; ++step) {
      set_grads(run_, step, source_params_);
      source.step();
    }
    good_ = source.state_dict();
    // The target has its own, different state (one step, another lr), which must survive.
    target_params_ = make_params(run_);
    target_ = std::make_unique<Sgd>(pointers(target_params_), options_);
    set_grads(run_, 5, target_params_);
    target_->step();
    target_->set_lr(0.125);
    before_ = target_->state_dict();
  }

  // Expects loading `bad` to fail with all of `fragments` in the message, changing nothing.
  void expect_rejected(const StateDict& bad, std::initializer_list<std::string> fragments) {
    expect_invalid_argument([&] { target_->load_state_dict(bad); }, fragments);
    EXPECT_EQ(target_->lr(), 0.125);
    expect_same_state(target_->state_dict(), before_);
  }

  GoldenRun run_;
  SgdOptions options_;
  std::vector<Parameter> source_params_;
  std::vector<Parameter> target_params_;
  std::unique_ptr<Sgd> target_;
  StateDict good_;
  StateDict before_;
};

TEST_F(SgdLoadErrors, GoodStateLoads) {
  EXPECT_EQ(good_.scalars.at("0.bias/step"), 2.0);
  target_->load_state_dict(good_);
  expect_same_state(target_->state_dict(), good_);
  EXPECT_EQ(target_->lr(), options_.lr);
}

TEST_F(SgdLoadErrors, MissingTensor) {
  StateDict bad = good_;
  bad.tensors.erase("2.weight/momentum_buffer");
  expect_rejected(bad, {"missing tensor key '2.weight/momentum_buffer'", "[3, 5]"});
}

TEST_F(SgdLoadErrors, MissingScalar) {
  StateDict bad = good_;
  bad.scalars.erase("0.bias/step");
  expect_rejected(bad, {"missing scalar key '0.bias/step'"});
  bad = good_;
  bad.scalars.erase("dampening");
  expect_rejected(bad, {"missing scalar key 'dampening'"});
}

TEST_F(SgdLoadErrors, ExtraKeys) {
  StateDict bad = good_;
  bad.tensors["0.weight/exp_avg"] = Tensor({5, 7});
  expect_rejected(bad, {"unexpected tensor key '0.weight/exp_avg'", "[5, 7]"});
  bad = good_;
  bad.scalars["betas.0"] = 0.9;
  expect_rejected(bad, {"unexpected scalar key 'betas.0'"});
  // A buffer for a parameter whose step count says it has none yet.
  bad = good_;
  bad.scalars["0.bias/step"] = 0.0;
  expect_rejected(bad, {"unexpected tensor key '0.bias/momentum_buffer'"});
}

TEST_F(SgdLoadErrors, ShapeMismatch) {
  StateDict bad = good_;
  bad.tensors["0.weight/momentum_buffer"] = Tensor({7, 5});
  expect_rejected(bad, {"'0.weight/momentum_buffer'", "[7, 5]", "[5, 7]"});
}

TEST_F(SgdLoadErrors, InvalidValues) {
  StateDict bad = good_;
  bad.scalars["nesterov"] = 0.5;
  expect_rejected(bad, {"'nesterov'", "flag"});
  bad = good_;
  bad.scalars["0.weight/step"] = 2.5;
  expect_rejected(bad, {"'0.weight/step'", "count"});
  bad = good_;
  bad.scalars["lr"] = -1.0;
  expect_rejected(bad, {"learning rate"});
  bad = good_;
  bad.scalars["nesterov"] = 1.0;
  bad.scalars["dampening"] = 0.5;
  expect_rejected(bad, {"Nesterov"});
}

}  // namespace
}  // namespace mpitrain::nn
