// Checkpoints of the sharded optimizer (zero_stage 1): each rank file holds its pieces, the
// manifest records the layout, and a checkpoint saved at N ranks and either stage loads on M
// ranks at either stage with the same optimizer state element for element; training then
// continues bit for bit as stage 0 would from the same checkpoint. The M-rank engines run on
// sub-communicators of the test's ranks (MPI_Comm_split), the others wait.

#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../checkpoint/checkpoint_test_util.hpp"
#include "engine_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/manifest.hpp"
#include "mpitrain/checkpoint/state_group.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/mlp.hpp"

namespace mpitrain {
namespace {

namespace fs = std::filesystem;
using checkpoint::testing::SharedTempDir;
using testing::flatten;
using testing::same_bits;
using testing::same_state;

constexpr std::size_t kFeatures = 8;
constexpr std::size_t kClasses = 4;
const std::vector<std::size_t> kHidden = {16, 12};

// An engine at `stage` over `comm` training a small MLP (several buckets, so parameters
// straddle the ranks' blocks) with AdamW on a synthetic set; a global batch of 8 examples.
struct TrainingRun {
  TrainingRun(const Communicator& comm, int stage, const fs::path& project)
      : model(nn::make_mlp(kFeatures, kHidden, kClasses, nn::Activation::relu, 0.0f, 7)),
        optimizer(model.parameters(), {}) {
    EngineConfig config;
    config.zero_stage = stage;
    config.first_bucket_mb = 1e-4;
    config.bucket_cap_mb = 3e-4;
    config.split_batches = true;  // the same global batch at every world size
    config.project.project_dir = project;
    engine = std::make_unique<Engine>(config, comm);
    data::SyntheticOptions d;
    d.size = 96;
    d.feature_dim = kFeatures;
    d.num_classes = kClasses;
    loader = std::make_unique<data::DataLoader>(
        engine->make_loader(std::make_shared<data::SyntheticDataset>(d), {.batch_size = 8, .seed = 2}));
    engine->prepare(model, optimizer, *loader);
  }
  void train(int steps) {
    data::Batch batch;
    Tensor grad;
    for (int s = 0; s < steps;) {
      if (!engine->next_batch(batch)) continue;
      nn::cross_entropy(model.forward(batch.features), batch.labels, grad);
      engine->backward(grad);
      engine->step();
      engine->zero_grad();
      ++s;
    }
  }
  nn::Sequential model;
  nn::AdamW optimizer;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<Engine> engine;
};

// Returns a communicator over the world's ranks 0..m-1, or null on the other ranks.
// Collective over the world.
std::unique_ptr<Communicator> first_ranks(const MpiRuntime& runtime, const Communicator& world, int m) {
  MPI_Comm split = MPI_COMM_NULL;
  EXPECT_EQ(MPI_Comm_split(MPI_COMM_WORLD, world.rank() < m ? 0 : MPI_UNDEFINED, world.rank(), &split),
            MPI_SUCCESS);
  if (split == MPI_COMM_NULL) return nullptr;
  auto sub = std::make_unique<Communicator>(runtime, static_cast<std::int64_t>(MPI_Comm_c2f(split)));
  MPI_Comm_free(&split);
  return sub;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ZeroCheckpointTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
  int n() const { return comm_.size(); }
};

struct Saved {
  StateDict optimizer;          // the whole state at the save
  std::vector<float> weights;   // at the save
};

// Trains 7 steps at the world's size and `stage`, saves to `dir`; returns what was saved.
Saved save_run(const Communicator& comm, int stage, const fs::path& dir, const fs::path& project) {
  TrainingRun run(comm, stage, project);
  run.train(7);
  run.engine->save_state(dir);
  return {run.engine->optimizer_state_dict(), flatten(run.model.parameters())};
}

// Loads `dir` on the first `m` ranks at `stage`, checks the state against `saved`, trains
// 5 steps and returns the weights (empty on ranks beyond m).
std::vector<float> load_and_continue(const MpiRuntime& runtime, const Communicator& world, int m, int stage,
                                     const fs::path& dir, const fs::path& project, const Saved& saved) {
  std::unique_ptr<Communicator> sub = first_ranks(runtime, world, m);
  if (!sub) return {};
  TrainingRun run(*sub, stage, project);
  run.engine->load_state(dir);
  EXPECT_TRUE(same_bits(flatten(run.model.parameters()), saved.weights));
  EXPECT_TRUE(same_state(run.engine->optimizer_state_dict(), saved.optimizer))
      << "loaded at " << m << " ranks, stage " << stage;
  run.train(5);
  return flatten(run.model.parameters());
}

TEST_F(ZeroCheckpointTest, ReshardsOnLoadAndContinuesBitwise) {
  SharedTempDir tmp(comm_, "zero_reshard");
  const fs::path project = tmp.path() / "project";
  for (int saved_stage : {1, 0}) {
    const fs::path dir = tmp.path() / ("stage" + std::to_string(saved_stage));
    const Saved saved = save_run(comm_, saved_stage, dir, project);
    // The layout: sharded only with more than one rank (one rank holds everything).
    const checkpoint::Manifest manifest = checkpoint::read_manifest(dir);
    EXPECT_EQ(manifest.zero_stage, saved_stage == 1 && n() > 1 ? 1 : 0);
    EXPECT_EQ(read_text(dir / "MANIFEST.json").find("zero_stage") != std::string::npos, manifest.zero_stage == 1);
    // Every target world size and stage: stage 1 at N, N/2 (and so 4 -> 2), 1; stage 0 at
    // N and 1. Each continues as stage 0 at the same world size does.
    std::vector<int> sizes = {n(), 1};
    if (n() >= 4) sizes.push_back(n() / 2);
    for (int m : sizes) {
      SCOPED_TRACE("saved at stage " + std::to_string(saved_stage) + " on " + std::to_string(n()) +
                   " ranks, loaded on " + std::to_string(m));
      const std::vector<float> zero = load_and_continue(runtime_, comm_, m, 1, dir, project, saved);
      const std::vector<float> plain = load_and_continue(runtime_, comm_, m, 0, dir, project, saved);
      EXPECT_TRUE(same_bits(zero, plain));
    }
  }
}

TEST_F(ZeroCheckpointTest, SameWorldResumeIsBitwiseAndRankFilesHoldThePieces) {
  SharedTempDir tmp(comm_, "zero_resume");
  const fs::path project = tmp.path() / "project";
  TrainingRun run(comm_, 1, project);
  run.train(6);
  run.engine->save_state(tmp.path() / "ckpt");
  run.train(4);
  const std::vector<float> uninterrupted = flatten(run.model.parameters());
  const StateDict state = run.engine->optimizer_state_dict();
  TrainingRun resumed(comm_, 1, project);
  resumed.engine->load_state(tmp.path() / "ckpt");
  resumed.train(4);
  EXPECT_TRUE(same_bits(flatten(resumed.model.parameters()), uninterrupted));
  EXPECT_TRUE(same_state(resumed.engine->optimizer_state_dict(), state));
  // This rank's file holds its pieces with their offsets: AdamW's two slots per value, and
  // together the ranks hold each value once.
  checkpoint::LoadedCheckpoint loaded = run.engine->checkpoints().load(tmp.path() / "ckpt", comm_);
  if (n() > 1) {
    const checkpoint::StateGroup& mine = loaded.state.per_rank.at("optimizer");
    std::size_t values = 0;
    for (const auto& [key, t] : mine.tensors) values += t.numel();
    std::size_t begins = 0;
    for (const auto& [key, v] : mine.integers) begins += key.find("/begin") != std::string::npos ? 1 : 0;
    EXPECT_GT(begins, 0u);
    const double total = comm_.allreduce_value(static_cast<double>(values), ReduceOp::sum);
    std::size_t numel = 0;
    for (const nn::Parameter* p : run.model.parameters()) numel += p->value.numel();
    EXPECT_EQ(total, 2.0 * static_cast<double>(numel));
    EXPECT_EQ(loaded.state.replicated.at("optimizer").tensors.size(), 0u);
  } else {
    EXPECT_EQ(loaded.state.per_rank.count("optimizer"), 0u);
  }
}

// A registered object that refuses to load on the last rank: every rank rolls back, after
// the optimizer pieces were already applied.
class Refuser final : public checkpoint::Checkpointable {
 public:
  explicit Refuser(bool refuse) : refuse_(refuse) {}
  void save(checkpoint::H5Group& group) const override {
    checkpoint::StateGroup g;
    g.integers["value"] = 1;
    checkpoint::write_state_group(group, g);
  }
  void load(const checkpoint::H5Group&) override {
    if (refuse_) throw std::runtime_error("Refuser refuses to load here");
  }

 private:
  bool refuse_;
};

TEST_F(ZeroCheckpointTest, AFailedLoadLeavesTheShardedStateAsItWas) {
  SharedTempDir tmp(comm_, "zero_rollback");
  const fs::path project = tmp.path() / "project";
  Refuser refuser(comm_.rank() + 1 == comm_.size());
  TrainingRun run(comm_, 1, project);
  run.engine->register_for_checkpointing("refuser", refuser);
  run.train(3);
  run.engine->save_state(tmp.path() / "earlier");
  run.train(4);
  const StateDict before = run.engine->optimizer_state_dict();
  const std::vector<float> weights = flatten(run.model.parameters());
  EXPECT_THROW(run.engine->load_state(tmp.path() / "earlier"), checkpoint::CheckpointError);
  EXPECT_TRUE(same_state(run.engine->optimizer_state_dict(), before));
  EXPECT_TRUE(same_bits(flatten(run.model.parameters()), weights));
}

}  // namespace
}  // namespace mpitrain
