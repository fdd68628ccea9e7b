#include "scheduler_from_config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpitrain/nn/sgd.hpp"

namespace mpitrain::app {
namespace {

// An optimizer over one parameter, for schedulers to drive.
struct OneOptimizer {
  nn::Parameter w{"w", Tensor({2}), Tensor({2})};
  nn::Sgd sgd{{&w}, nn::SgdOptions{.lr = 1.0}};
};

TEST(SchedulerFromConfig, TakesKindWarmupAndTheRunLength) {
  OneOptimizer o;
  const TrainConfig config = load_config("", {"scheduler.kind=cosine", "scheduler.warmup_steps=10"});
  const nn::LrScheduler scheduler = make_scheduler(config, o.sgd, 1000);
  EXPECT_EQ(scheduler.kind(), nn::LrScheduleKind::cosine);
  EXPECT_EQ(scheduler.warmup_steps(), 10);
  EXPECT_EQ(scheduler.total_steps(), 1000);
  EXPECT_EQ(o.sgd.lr(), 0.0);  // the warm-up starts from 0
}

TEST(SchedulerFromConfig, UnknownKindIsAnErrorNamingTheKey) {
  OneOptimizer o;
  TrainConfig config = load_config("", {});
  config.scheduler.kind = "step";
  try {
    make_scheduler(config, o.sgd, 100);
    FAIL() << "no error for an unknown scheduler";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("scheduler.kind"), std::string::npos) << message;
    EXPECT_NE(message.find("step"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace mpitrain::app
