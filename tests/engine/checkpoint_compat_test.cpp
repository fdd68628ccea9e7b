// Checkpoints written before issue 12 load after it: tests/engine/data/checkpoint_v1 was
// saved by 2 ranks with the code of that time (data/README.md), and checkpoint_v1.expected
// holds the values it was saved with. Loaded by the same world size, every value comes back
// bit for bit; loaded by 1 rank, the replicated state comes back bit for bit, rank 0 gets
// its own random streams, and the loader position is converted by examples seen.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../checkpoint/checkpoint_test_util.hpp"
#include "checkpoint_fixture_run.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

namespace fs = std::filesystem;
using checkpoint::testing::SharedTempDir;
using testing::FixtureRun;
using Expected = std::map<std::string, std::vector<double>>;

const fs::path kData = fs::path(MPITRAIN_ENGINE_TEST_DATA);

// Returns the lines of checkpoint_v1.expected: key -> values (hexadecimal floating point).
Expected read_expected() {
  std::ifstream in(kData / "checkpoint_v1.expected");
  Expected out;
  std::string text;
  while (std::getline(in, text)) {
    std::istringstream line(text);
    std::string key, value;
    line >> key;
    while (line >> value) out[key].push_back(std::strtod(value.c_str(), nullptr));
  }
  return out;
}

std::vector<double> of(std::span<const float> values) { return {values.begin(), values.end()}; }
double num(std::uint64_t v) { return static_cast<double>(v); }

class CheckpointCompatTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
  Expected expected_ = read_expected();

  std::vector<double> want(const std::string& key) const {
    const auto it = expected_.find(key);
    return it == expected_.end() ? std::vector<double>{} : it->second;
  }
};

TEST_F(CheckpointCompatTest, TheCommittedCheckpointLoadsWithTheValuesItWasSavedWith) {
  ASSERT_FALSE(expected_.empty()) << "cannot read " << (kData / "checkpoint_v1.expected");
  const int saved_world = static_cast<int>(want("world_size").at(0));
  SharedTempDir dir(comm_, "checkpoint_compat");
  FixtureRun run(comm_, dir.path());
  const Engine::LoadReport report = run.engine->load_state(kData / "checkpoint_v1");
  EXPECT_EQ(report.dir, kData / "checkpoint_v1");

  // The replicated state, bit for bit at any world size.
  for (const nn::Parameter* p : run.engine->parameters()) {
    EXPECT_EQ(of(p->value.span()), want("model." + p->name)) << p->name;
  }
  const StateDict o = run.optimizer.state_dict();
  ASSERT_FALSE(o.tensors.empty());
  for (const auto& [k, t] : o.tensors) EXPECT_EQ(of(t.span()), want("optimizer.tensor." + k)) << k;
  for (const auto& [k, v] : o.scalars) EXPECT_EQ(std::vector<double>{v}, want("optimizer.scalar." + k)) << k;
  for (const auto& [k, v] : run.scheduler.state_dict().scalars) {
    EXPECT_EQ(std::vector<double>{v}, want("scheduler." + k)) << k;
  }
  EXPECT_EQ(std::vector<double>{run.optimizer.lr()}, want("optimizer.lr"));
  const LossScaler::State s = run.engine->loss_scaler()->state();
  EXPECT_EQ((std::vector<double>{s.scale, num(static_cast<std::uint64_t>(s.growth_tracker)),
                                 num(static_cast<std::uint64_t>(s.hysteresis)),
                                 num(static_cast<std::uint64_t>(s.skipped_steps))}),
            want("scaler"));
  EXPECT_EQ(std::vector<double>{static_cast<double>(run.counter.value)}, want("counter"));
  const EngineState& st = run.engine->state();
  EXPECT_EQ(std::vector<double>{num(st.step)}, want("engine.step"));
  EXPECT_EQ(std::vector<double>{num(st.micro_step)}, want("engine.micro_step"));
  EXPECT_EQ(std::vector<double>{num(st.samples_seen)}, want("engine.samples_seen"));
  EXPECT_EQ(std::vector<double>{num(st.skipped_steps)}, want("engine.skipped_steps"));
  EXPECT_EQ(std::vector<double>{num(st.epoch)}, want("engine.epoch"));
  EXPECT_EQ(std::vector<double>{static_cast<double>(run.loader->epoch())}, want("loader.epoch"));

  // The loader position: the same batch at the saved world size, else the batch holding the
  // same number of examples of the epoch's order (rounded down).
  const auto saved_position = static_cast<std::size_t>(want("loader.position").at(0));
  const std::size_t saved_global = FixtureRun::kBatchPerRank * static_cast<std::size_t>(saved_world);
  const std::size_t global = FixtureRun::kBatchPerRank * static_cast<std::size_t>(comm_.size());
  const std::size_t position = saved_position * saved_global / global;
  EXPECT_EQ(run.loader->position(), position);
  EXPECT_EQ(st.batches_in_epoch, position);
  EXPECT_EQ(report.warnings.empty(), comm_.size() == saved_world);

  // This rank's random streams: its own when the checkpoint has a rank file for it.
  ASSERT_LT(comm_.rank(), saved_world);
  int streams = 0;
  for (const auto& [path, stream] : run.model.random_streams()) {
    for (const auto& [key, value] : stream->state_dict().scalars) {
      EXPECT_EQ(std::vector<double>{value},
                want("rng.rank" + std::to_string(comm_.rank()) + "." + path + "." + key))
          << path << " " << key;
      ++streams;
    }
  }
  EXPECT_GT(streams, 0);

  // And training continues from there.
  run.train(2);
  EXPECT_EQ(st.step, static_cast<std::uint64_t>(want("engine.step").at(0)) + 2);
}

}  // namespace
}  // namespace mpitrain
