// AdamW against torch.optim.AdamW 1.13 (golden data from golden/make_optim_golden.py):
// values and state must agree bit for bit (0 ulp), and state dicts must resume runs exactly.

#include "mpitrain/nn/adamw.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/nn/lr_scheduler.hpp"
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

AdamWOptions recorded_options(const OptimGoldenFile& file, const std::string& group) {
  return {.lr = file.attribute(group, "lr"),
          .betas = {file.attribute(group, "betas.0"), file.attribute(group, "betas.1")},
          .eps = file.attribute(group, "eps"),
          .weight_decay = file.attribute(group, "weight_decay"),
          .amsgrad = file.attribute(group, "amsgrad") != 0.0,
          .maximize = file.attribute(group, "maximize") != 0.0};
}

const std::vector<std::string> kSlots = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};

class AdamWGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(AdamWGolden, MatchesTorchBitForBit) {
  const OptimGoldenFile file(testing::optim_golden_path());
  const GoldenRun run = read_run(file, "adamw/" + GetParam());
  std::vector<Parameter> params = make_params(run);
  AdamW opt(pointers(params), recorded_options(file, run.group));
  expect_golden_run(file, run, params, opt, kSlots);
}

TEST_P(AdamWGolden, StateDictResumesExactly) {
  const OptimGoldenFile file(testing::optim_golden_path());
  const GoldenRun run = read_run(file, "adamw/" + GetParam());
  const AdamWOptions options = recorded_options(file, run.group);
  auto make = [&](std::vector<Parameter*> ps) -> std::unique_ptr<Optimizer> {
    return std::make_unique<AdamW>(std::move(ps), options);
  };
  for (std::size_t k : {0u, 1u, 5u}) expect_resumes_exactly(run, make, k);
}

INSTANTIATE_TEST_SUITE_P(Torch113, AdamWGolden,
                         ::testing::Values("defaults", "weight_decay_0", "betas_eps",
                                           "amsgrad_maximize"));

// torch AdamW driven by LambdaLR with the cosine-with-warm-up multiplier: our scheduler must
// produce the same lr before every step (0 for the first), and the updates must agree.
TEST(AdamW, WithCosineScheduleMatchesTorch) {
  const OptimGoldenFile file(testing::optim_golden_path());
  const GoldenRun run = read_run(file, "adamw/cosine_schedule");
  std::vector<Parameter> params = make_params(run);
  AdamW opt(pointers(params), recorded_options(file, run.group));
  const auto warmup = static_cast<std::int64_t>(file.attribute(run.group, "schedule_warmup_steps"));
  LrScheduler scheduler(opt, LrScheduleKind::cosine, warmup,
                        static_cast<std::int64_t>(run.steps));
  expect_golden_run(file, run, params, opt, kSlots, &scheduler);
}

TEST(AdamW, DefaultsAreTorchs) {
  const AdamWOptions o;
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.betas[0], 0.9);
  EXPECT_EQ(o.betas[1], 0.999);
  EXPECT_EQ(o.eps, 1e-8);
  EXPECT_EQ(o.weight_decay, 1e-2);
  EXPECT_FALSE(o.amsgrad);
  EXPECT_FALSE(o.maximize);
}

TEST(AdamW, RejectsWhatTorchRejects) {
  Parameter p{"w", Tensor({2}), Tensor({2})};
  expect_invalid_argument([&] { AdamW({&p}, {.lr = -1.0}); }, {"learning rate"});
  expect_invalid_argument([&] { AdamW({&p}, {.eps = -1e-8}); }, {"epsilon"});
  expect_invalid_argument([&] { AdamW({&p}, {.betas = {1.0, 0.999}}); },
                          {"beta parameter at index 0"});
  expect_invalid_argument([&] { AdamW({&p}, {.betas = {0.9, -0.1}}); },
                          {"beta parameter at index 1"});
  expect_invalid_argument([&] { AdamW({&p}, {.weight_decay = -0.01}); }, {"weight_decay"});
  EXPECT_NO_THROW(AdamW({&p}, {.lr = 0.0, .betas = {0.0, 0.0}, .eps = 0.0}));
}

TEST(AdamW, MomentsAreCreatedLazily) {
  Parameter a{"a", Tensor({2}), Tensor({2})};
  Parameter b{"b", Tensor({3}), Tensor()};  // no gradient: skipped, like .grad None
  AdamW opt({&a, &b}, {.amsgrad = true});
  EXPECT_TRUE(opt.state_dict().tensors.empty());
  a.grad.fill(1.0f);
  opt.step();
  const StateDict s = opt.state_dict();
  EXPECT_EQ(s.tensors.size(), 3u);
  EXPECT_TRUE(s.tensors.contains("a/exp_avg"));
  EXPECT_TRUE(s.tensors.contains("a/exp_avg_sq"));
  EXPECT_TRUE(s.tensors.contains("a/max_exp_avg_sq"));
  EXPECT_EQ(s.scalars.at("a/step"), 1.0);
  EXPECT_EQ(s.scalars.at("b/step"), 0.0);
  EXPECT_EQ(b.value[0], 0.0f);
  // First step from 0 with g = 1: m = 0.1, v = 0.001, both bias-corrected to 1, so the
  // update is -lr * 1 / (1 + eps), i.e. -lr to float precision.
  EXPECT_FLOAT_EQ(a.value[0], -1e-3f);
}

TEST(AdamWUpdate, RefusesMismatchedSizesAndStepZeroNamingThem) {
  std::vector<float> p(4), g(4), m(4), v(3);
  try {
    adamw_update(p, g, m, v, {}, AdamWOptions{}, 1);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "adamw_update: param has 4 elements, grad 4, exp_avg 4, exp_avg_sq 3, "
                           "max_exp_avg_sq 0 (amsgrad off), step 1 (must be >= 1)");
  }
  v.resize(4);
  EXPECT_THROW(adamw_update(p, g, m, v, {}, AdamWOptions{}, 0), std::invalid_argument);
  EXPECT_THROW(adamw_update(p, g, m, v, {}, AdamWOptions{.amsgrad = true}, 1), std::invalid_argument);
}

TEST(AdamWUpdate, FirstStepMovesEachValueByLrAgainstTheGradientSign) {
  // At step 1 with zero moments: m = (1-b1) g, v = (1-b2) g^2, the bias corrections make
  // m_hat = g and v_hat = g^2, so p -= lr * g / (|g| + eps) = lr * sign(g) up to eps/|g|.
  std::vector<float> p = {1.0f, 1.0f, 0.0f}, g = {2.0f, -4.0f, 0.0f}, m(3), v(3);
  adamw_update(p, g, m, v, {}, AdamWOptions{.lr = 0.5, .weight_decay = 0.0}, 1);
  EXPECT_NEAR(p[0], 0.5f, 1e-6f);
  EXPECT_NEAR(p[1], 1.5f, 1e-6f);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_FLOAT_EQ(m[1], -0.4f);
}

TEST(AdamW, OptionsReportTheCurrentLr) {
  Parameter a{"a", Tensor({1}), Tensor({1})};
  AdamW opt({&a}, {.betas = {0.8, 0.9}});
  opt.set_lr(0.5);
  EXPECT_EQ(opt.options().lr, 0.5);
  EXPECT_EQ(opt.options().betas[0], 0.8);
  EXPECT_EQ(opt.kind(), "adamw");
}

// A state after 3 steps of the "defaults" run, where 0.bias missed its first gradient.
class AdamWLoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    const OptimGoldenFile file(testing::optim_golden_path());
    run_ = read_run(file, "adamw/defaults");
    options_ = recorded_options(file, run_.group);
    source_params_ = make_params(run_);
    AdamW source(pointers(source_params_), options_);
    for (std::size_t step = 0; step < 3; ++step) {
      set_grads(run_, step, source_params_);
      source.step();
    }
    good_ = source.state_dict();
    target_params_ = make_params(run_);
    target_ = std::make_unique<AdamW>(pointers(target_params_), options_);
    set_grads(run_, 5, target_params_);
    target_->step();
    target_->set_lr(0.125);
    before_ = target_->state_dict();
  }

  void expect_rejected(const StateDict& bad, std::initializer_list<std::string> fragments) {
    expect_invalid_argument([&] { target_->load_state_dict(bad); }, fragments);
    EXPECT_EQ(target_->lr(), 0.125);
    expect_same_state(target_->state_dict(), before_);
  }

  GoldenRun run_;
  AdamWOptions options_;
  std::vector<Parameter> source_params_;
  std::vector<Parameter> target_params_;
  std::unique_ptr<AdamW> target_;
  StateDict good_;
  StateDict before_;
};

TEST_F(AdamWLoadErrors, GoodStateLoads) {
  EXPECT_EQ(good_.scalars.at("0.bias/step"), 2.0);
  EXPECT_EQ(good_.tensors.size(), 6u);
  target_->load_state_dict(good_);
  expect_same_state(target_->state_dict(), good_);
}

TEST_F(AdamWLoadErrors, MissingKeys) {
  StateDict bad = good_;
  bad.tensors.erase("0.bias/exp_avg_sq");
  expect_rejected(bad, {"missing tensor key '0.bias/exp_avg_sq'", "[5]"});
  bad = good_;
  bad.scalars.erase("betas.1");
  expect_rejected(bad, {"missing scalar key 'betas.1'"});
  // amsgrad on: every stepped parameter then needs a max_exp_avg_sq.
  bad = good_;
  bad.scalars["amsgrad"] = 1.0;
  expect_rejected(bad, {"missing tensor key '0.bias/max_exp_avg_sq'"});
}

TEST_F(AdamWLoadErrors, ExtraKeys) {
  StateDict bad = good_;
  bad.tensors["3.weight/exp_avg"] = Tensor({2, 2});
  expect_rejected(bad, {"unexpected tensor key '3.weight/exp_avg'", "[2, 2]"});
  bad = good_;
  bad.scalars["momentum"] = 0.0;
  expect_rejected(bad, {"unexpected scalar key 'momentum'"});
}

TEST_F(AdamWLoadErrors, ShapeMismatch) {
  StateDict bad = good_;
  bad.tensors["2.weight/exp_avg"] = Tensor({15});
  expect_rejected(bad, {"'2.weight/exp_avg'", "[15]", "[3, 5]"});
}

TEST_F(AdamWLoadErrors, InvalidValues) {
  StateDict bad = good_;
  bad.scalars["betas.0"] = 1.5;
  expect_rejected(bad, {"beta parameter at index 0"});
  bad = good_;
  bad.scalars["2.weight/step"] = -1.0;
  expect_rejected(bad, {"'2.weight/step'", "count"});
  bad = good_;
  bad.scalars["maximize"] = 3.0;
  expect_rejected(bad, {"'maximize'", "flag"});
}

}  // namespace
}  // namespace mpitrain::nn
