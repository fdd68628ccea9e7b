// Bring your own model beyond parameters (engine/engine_external.cpp): set_optimizer,
// register_buffers, broadcast_buffers and the /buffers checkpoint group, at 1-4 ranks.

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "../checkpoint/checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/sgd.hpp"

namespace mpitrain {
namespace {

using checkpoint::testing::SharedTempDir;

class EngineExternal : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
  int rank() const { return comm_.rank(); }
};

// A user's model: a parameter "w" (4 values) and buffers "stats" (3 fp32) and "count" (int64).
struct UserModel {
  std::vector<float> w = std::vector<float>(4, 1.0f);
  std::vector<float> stats;
  std::int64_t count;
  explicit UserModel(int rank) : stats(3, static_cast<float>(rank) + 0.5f), count(10 + rank) {}
  std::vector<ExternalBuffer> buffers() {
    return {{"stats", {3}, stats, {}}, {"count", {}, {}, std::span<std::int64_t>(&count, 1)}};
  }
};

TEST_F(EngineExternal, BroadcastBuffersCopiesRankZerosValues) {
  Engine engine(EngineConfig{}, comm_);
  UserModel m(rank());
  engine.register_parameters({{"w", {4}, m.w, {}}});
  engine.register_buffers(m.buffers());
  ASSERT_EQ(engine.buffers().size(), 2u);
  EXPECT_EQ(m.count, 10 + rank());  // registering does not broadcast
  engine.broadcast_buffers();
  EXPECT_EQ(m.stats, std::vector<float>(3, 0.5f));
  EXPECT_EQ(m.count, 10);
}

TEST_F(EngineExternal, InvalidOrDifferingBuffersThrowOnEveryRank) {
  Engine engine(EngineConfig{}, comm_);
  UserModel m(rank());
  engine.register_parameters({{"w", {4}, m.w, {}}});
  std::vector<std::int64_t> two(2);
  EXPECT_THROW(engine.register_buffers({{"pair", {2}, {}, two}}), std::invalid_argument);
  EXPECT_THROW(engine.register_buffers({{"stats", {2}, m.stats, {}}}), std::invalid_argument);
  EXPECT_THROW(engine.register_buffers({{"a", {3}, m.stats, {}}, {"a", {3}, m.stats, {}}}),
               std::invalid_argument);
  if (comm_.size() > 1) {
    const std::string name = rank() == 0 ? "stats" : "other";
    EXPECT_THROW(engine.register_buffers({{name, {3}, m.stats, {}}}), std::runtime_error);
  }
  EXPECT_TRUE(engine.buffers().empty());
}

TEST_F(EngineExternal, SetOptimizerIsSteppedAndCheckpointedWithTheBuffers) {
  SharedTempDir dir(comm_, "engine_external");
  EngineConfig config;
  config.project.project_dir = dir.path() / "project";
  Engine engine(config, comm_);
  UserModel m(rank());
  engine.register_parameters({{"w", {4}, m.w, {}}});
  engine.register_buffers(m.buffers());
  engine.broadcast_buffers();
  nn::SgdOptions o;
  o.lr = 0.5;
  o.momentum = 0.9;
  nn::Sgd sgd(engine.parameters(), o);
  engine.set_optimizer(sgd);
  engine.backward([&] {
    std::span<float> g = engine.gradient("w");
    for (float& v : g) v = 1.0f * engine.loss_gradient_scale();
    engine.grad_ready(0);
  });
  EXPECT_TRUE(engine.step());
  EXPECT_EQ(m.w, std::vector<float>(4, 0.5f));  // 1 - 0.5 * mean gradient 1
  engine.save_state(dir.path() / "ckpt");
  if (rank() == 0) {
    const checkpoint::H5File f = checkpoint::H5File::open_read_only(dir.path() / "ckpt" / "state.h5");
    const checkpoint::H5Group buffers = f.root().open_group("buffers");
    EXPECT_TRUE(buffers.is_tensor("stats"));
    EXPECT_EQ(buffers.read_int64_attribute("count"), 10);
    EXPECT_EQ(f.root().open_group("optimizer").read_string("kind"), "sgd");
  }
  m.stats.assign(3, 7.0f);
  m.count = 99;
  m.w.assign(4, 3.0f);
  engine.load_state(dir.path() / "ckpt");
  EXPECT_EQ(m.stats, std::vector<float>(3, 0.5f));
  EXPECT_EQ(m.count, 10);
  EXPECT_EQ(m.w, std::vector<float>(4, 0.5f));

  // A checkpoint without buffers does not load into an engine that has them.
  Engine plain(config, comm_);
  UserModel other(rank());
  plain.register_parameters({{"w", {4}, other.w, {}}});
  plain.save_state(dir.path() / "plain");
  try {
    engine.load_state(dir.path() / "plain");
    FAIL() << "no error";
  } catch (const checkpoint::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint has no group /buffers"), std::string::npos) << e.what();
  }
}

TEST_F(EngineExternal, SetOptimizerRefusesAParameterThatIsNotRegistered) {
  Engine engine(EngineConfig{}, comm_);
  UserModel m(rank());
  engine.register_parameters({{"w", {4}, m.w, {}}});
  nn::Parameter stranger;
  stranger.name = "stranger";
  stranger.value = Tensor({2});
  nn::SgdOptions o;
  o.lr = 0.1;
  nn::Sgd sgd({&stranger}, o);
  try {
    engine.set_optimizer(sgd);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Engine::set_optimizer: optimizer parameter 'stranger' is not a registered parameter");
  }
}

}  // namespace
}  // namespace mpitrain
