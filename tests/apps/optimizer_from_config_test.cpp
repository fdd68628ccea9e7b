#include "optimizer_from_config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/sgd.hpp"

namespace mpitrain::app {
namespace {

// One parameter "w" of two values, for optimizers to hold.
struct OneParameter {
  nn::Parameter w{"w", Tensor({2}), Tensor({2})};
  std::vector<nn::Parameter*> params() { return {&w}; }
};

TEST(OptimizerFromConfig, AdamwTakesItsKeys) {
  OneParameter p;
  const TrainConfig config = load_config(
      "", {"optimizer.lr=0.5", "optimizer.betas=[0.8, 0.99]", "optimizer.eps=1e-6", "optimizer.weight_decay=0.1"});
  const auto optimizer = make_optimizer(config, p.params());
  const auto* adamw = dynamic_cast<const nn::AdamW*>(optimizer.get());
  ASSERT_NE(adamw, nullptr);
  const nn::AdamWOptions o = adamw->options();
  EXPECT_EQ(o.lr, 0.5);
  EXPECT_EQ(o.betas[0], 0.8);
  EXPECT_EQ(o.betas[1], 0.99);
  EXPECT_EQ(o.eps, 1e-6);
  EXPECT_EQ(o.weight_decay, 0.1);
  EXPECT_EQ(optimizer->parameters(), p.params());
}

TEST(OptimizerFromConfig, SgdTakesItsKeys) {
  OneParameter p;
  const TrainConfig config = load_config("", {"optimizer.kind=sgd", "optimizer.lr=0.1", "optimizer.momentum=0.9",
                                              "optimizer.nesterov=true", "optimizer.weight_decay=0.001"});
  const auto optimizer = make_optimizer(config, p.params());
  const auto* sgd = dynamic_cast<const nn::Sgd*>(optimizer.get());
  ASSERT_NE(sgd, nullptr);
  const nn::SgdOptions o = sgd->options();
  EXPECT_EQ(o.lr, 0.1);
  EXPECT_EQ(o.momentum, 0.9);
  EXPECT_TRUE(o.nesterov);
  EXPECT_EQ(o.weight_decay, 0.001);
}

TEST(OptimizerFromConfig, UnknownKindIsAnErrorNamingTheKey) {
  OneParameter p;
  TrainConfig config = load_config("", {});
  config.optimizer.kind = "lamb";
  try {
    make_optimizer(config, p.params());
    FAIL() << "no error for an unknown optimizer";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("optimizer.kind"), std::string::npos) << message;
    EXPECT_NE(message.find("lamb"), std::string::npos) << message;
  }
}

TEST(OptimizerFromConfig, RefusedSettingIsAConfigErrorNamingTheOptimizer) {
  OneParameter p;
  TrainConfig config = load_config("", {});
  config.optimizer.lr = -1.0;
  try {
    make_optimizer(config, p.params());
    FAIL() << "no error for a negative learning rate";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("optimizer: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace mpitrain::app
