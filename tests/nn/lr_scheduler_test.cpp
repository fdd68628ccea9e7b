// LrScheduler against torch LambdaLR with the transformers multipliers (golden data from
// golden/make_optim_golden.py). The lr sequences must agree exactly (same double operations
// in the same order); the brief's bound of 1e-12 relative is checked as equality.

#include "mpitrain/nn/lr_scheduler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "mpitrain/nn/sgd.hpp"
#include "optim_golden.hpp"

namespace mpitrain::nn {
namespace {

using testing::expect_invalid_argument;
using testing::OptimGoldenFile;

struct Case {
  std::string kind;
  std::int64_t warmup;
  std::int64_t total;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.kind << " warmup " << c.warmup << " total " << c.total;
}

std::string group_of(const Case& c) {
  return "scheduler/" + c.kind + "_w" + std::to_string(c.warmup) + "_t" + std::to_string(c.total);
}

class SchedulerGolden : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerGolden, MatchesLambdaLrExactly) {
  const Case c = GetParam();
  const OptimGoldenFile file(testing::optim_golden_path());
  const std::string group = group_of(c);
  const std::vector<double> expected = file.doubles(group + "/lr");
  ASSERT_EQ(file.attribute(group, "warmup_steps"), static_cast<double>(c.warmup));
  ASSERT_EQ(file.attribute(group, "total_steps"), static_cast<double>(c.total));

  Parameter p{"p", Tensor({1}), Tensor({1})};
  Sgd opt({&p}, {.lr = file.attribute(group, "base_lr")});
  LrScheduler scheduler = make_scheduler(c.kind, opt, c.warmup, c.total);
  EXPECT_EQ(to_string(scheduler.kind()), c.kind);
  for (std::size_t s = 0; s < expected.size(); ++s) {
    if (s > 0) scheduler.step();
    ASSERT_EQ(scheduler.last_step(), static_cast<std::int64_t>(s));
    ASSERT_EQ(scheduler.last_lr(), expected[s]) << group << " at step " << s;
    ASSERT_EQ(opt.lr(), expected[s]) << group << " at step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Transformers, SchedulerGolden,
    ::testing::Values(Case{"constant", 0, 20}, Case{"constant", 3, 20}, Case{"linear", 3, 20},
                      Case{"cosine", 3, 20}, Case{"linear", 0, 20}, Case{"cosine", 0, 20},
                      Case{"linear", 5, 5}, Case{"cosine", 5, 5}, Case{"cosine", 7, 1000}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return info.param.kind + "_w" + std::to_string(info.param.warmup) + "_t" +
             std::to_string(info.param.total);
    });

TEST(LrScheduler, FollowsTheLambdaLrConvention) {
  Parameter p{"p", Tensor({1}), Tensor({1})};
  Sgd opt({&p}, {.lr = 0.5});
  LrScheduler linear(opt, LrScheduleKind::linear, 4, 8);
  // After construction: base_lr * lambda(0), which is 0 during a warm-up.
  EXPECT_EQ(linear.base_lr(), 0.5);
  EXPECT_EQ(linear.last_step(), 0);
  EXPECT_EQ(linear.last_lr(), 0.0);
  EXPECT_EQ(opt.lr(), 0.0);
  linear.step();
  EXPECT_EQ(opt.lr(), 0.5 * 0.25);
  for (int s = 2; s <= 4; ++s) linear.step();
  EXPECT_EQ(opt.lr(), 0.5);  // warm-up done
  for (int s = 5; s <= 8; ++s) linear.step();
  EXPECT_EQ(opt.lr(), 0.0);  // decayed to 0 at total_steps
  EXPECT_EQ(linear.multiplier(6), 0.5);
}

TEST(LrScheduler, AdvancesOnlyOnStep) {
  Parameter p{"p", Tensor({2}), Tensor({2})};
  Sgd opt({&p}, {.lr = 1.0});
  LrScheduler cosine(opt, LrScheduleKind::cosine, 2, 10);
  cosine.step();
  const double lr = cosine.last_lr();
  p.grad.fill(1.0f);
  for (int k = 0; k < 3; ++k) opt.step();  // optimizer steps do not move the schedule
  EXPECT_EQ(cosine.last_step(), 1);
  EXPECT_EQ(cosine.last_lr(), lr);
  EXPECT_EQ(cosine.last_lr(), lr);  // reading does not either
  EXPECT_EQ(opt.lr(), lr);
  opt.set_lr(123.0);  // someone else sets the lr: the next scheduler step overrides it
  EXPECT_EQ(cosine.last_lr(), lr);
  cosine.step();
  EXPECT_EQ(cosine.last_step(), 2);
  EXPECT_EQ(opt.lr(), 1.0);
}

TEST(LrScheduler, ConstantWithoutWarmupKeepsTheLr) {
  Parameter p{"p", Tensor({1}), Tensor({1})};
  Sgd opt({&p}, {.lr = 0.3});
  LrScheduler constant = make_scheduler("constant", opt, 0, 0);
  for (int s = 0; s < 5; ++s) {
    EXPECT_EQ(opt.lr(), 0.3);
    constant.step();
  }
}

TEST(LrScheduler, RejectsBadArguments) {
  Parameter p{"p", Tensor({1}), Tensor({1})};
  Sgd opt({&p}, {.lr = 0.3});
  expect_invalid_argument([&] { make_scheduler("cosine_with_restarts", opt, 0, 10); },
                          {"'cosine_with_restarts'", "constant, linear, cosine"});
  expect_invalid_argument([&] { make_scheduler("linear", opt, -1, 10); }, {"warmup_steps"});
  expect_invalid_argument([&] { make_scheduler("linear", opt, 0, -10); }, {"total_steps"});
  EXPECT_EQ(opt.lr(), 0.3);
  EXPECT_EQ(parse_lr_schedule_kind("linear"), LrScheduleKind::linear);
}

TEST(LrScheduler, StateDictResumesExactly) {
  Parameter p{"p", Tensor({1}), Tensor({1})};
  Sgd straight_opt({&p}, {.lr = 3e-4});
  LrScheduler straight(straight_opt, LrScheduleKind::cosine, 3, 20);
  Sgd first_opt({&p}, {.lr = 3e-4});
  LrScheduler first(first_opt, LrScheduleKind::cosine, 3, 20);
  for (int s = 0; s < 7; ++s) {
    straight.step();
    first.step();
  }
  const StateDict saved = first.state_dict();
  EXPECT_EQ(saved.scalars.size(), 4u);
  EXPECT_EQ(saved.scalars.at("base_lr"), 3e-4);
  EXPECT_EQ(saved.scalars.at("last_step"), 7.0);
  EXPECT_EQ(saved.scalars.at("warmup_steps"), 3.0);
  EXPECT_EQ(saved.scalars.at("total_steps"), 20.0);

  // A fresh run built with another lr and sizes: loading restores the saved schedule.
  Sgd resumed_opt({&p}, {.lr = 1.0});
  LrScheduler resumed(resumed_opt, LrScheduleKind::cosine, 0, 5);
  resumed.load_state_dict(saved);
  EXPECT_EQ(resumed.last_step(), 7);
  EXPECT_EQ(resumed.base_lr(), 3e-4);
  EXPECT_EQ(resumed.last_lr(), straight.last_lr());
  EXPECT_EQ(resumed_opt.lr(), straight_opt.lr());
  for (int s = 7; s < 25; ++s) {
    straight.step();
    resumed.step();
    ASSERT_EQ(resumed_opt.lr(), straight_opt.lr()) << "step " << s + 1;
  }
}

// A schedule resized mid-run continues as one built with the new size from the start: the
// step count is kept, and the lr is set at once.
TEST(LrScheduler, SetTotalStepsKeepsTheStepCount) {
  Parameter p{"p", Tensor({1}), Tensor({1})};
  Sgd resized_opt({&p}, {.lr = 0.5});
  LrScheduler resized(resized_opt, LrScheduleKind::linear, 2, 10);
  Sgd sized_opt({&p}, {.lr = 0.5});
  LrScheduler sized(sized_opt, LrScheduleKind::linear, 2, 22);
  for (int s = 0; s < 6; ++s) {
    resized.step();
    sized.step();
  }
  EXPECT_EQ(resized_opt.lr(), 0.5 * 4.0 / 8.0);  // (10 - 6) / (10 - 2)
  resized.set_total_steps(22);
  EXPECT_EQ(resized.total_steps(), 22);
  EXPECT_EQ(resized.last_step(), 6);
  EXPECT_EQ(resized_opt.lr(), 0.5 * 16.0 / 20.0);  // (22 - 6) / (22 - 2)
  for (int s = 6; s < 22; ++s) {
    ASSERT_EQ(resized_opt.lr(), sized_opt.lr()) << "step " << s;
    resized.step();
    sized.step();
  }
  EXPECT_EQ(resized_opt.lr(), 0.0);
  expect_invalid_argument([&] { resized.set_total_steps(-1); }, {"set_total_steps", "total_steps (-1)"});
  EXPECT_EQ(resized.total_steps(), 22);
}

TEST(LrScheduler, LoadStateDictIsAllOrNothing) {
  Parameter p{"p", Tensor({1}), Tensor({1})};
  Sgd opt({&p}, {.lr = 0.1});
  LrScheduler linear(opt, LrScheduleKind::linear, 2, 10);
  linear.step();
  linear.step();
  linear.step();
  const StateDict good = linear.state_dict();
  const double lr = opt.lr();

  auto expect_rejected = [&](const StateDict& bad, std::initializer_list<std::string> fragments) {
    expect_invalid_argument([&] { linear.load_state_dict(bad); }, fragments);
    EXPECT_EQ(linear.last_step(), 3);
    EXPECT_EQ(linear.last_lr(), lr);
    EXPECT_EQ(opt.lr(), lr);
    EXPECT_EQ(linear.state_dict().scalars, good.scalars);
  };
  StateDict bad = good;
  bad.scalars.erase("total_steps");
  expect_rejected(bad, {"missing scalar key 'total_steps'"});
  bad = good;
  bad.scalars["last_epoch"] = 3.0;
  expect_rejected(bad, {"unexpected scalar key 'last_epoch'"});
  bad = good;
  bad.tensors["base_lrs"] = Tensor({1});
  expect_rejected(bad, {"unexpected tensor key 'base_lrs'", "[1]"});
  bad = good;
  bad.scalars["last_step"] = 2.5;
  expect_rejected(bad, {"'last_step'", "count"});
  bad = good;
  bad.scalars["warmup_steps"] = -1.0;
  expect_rejected(bad, {"'warmup_steps'", "count"});
  bad = good;
  bad.scalars["base_lr"] = std::nan("");
  expect_rejected(bad, {"'base_lr'"});
}

}  // namespace
}  // namespace mpitrain::nn
