// Weights into a model without the training loader or scheduler (engine/model_weights.hpp):
// - a trainer-style checkpoint (saved by an engine prepared with a loader and a scheduler)
//   fills a fresh model through mpitrain::load_model(checkpoint folder, model), bit for bit,
//   with no engine at all;
// - an engine prepared without a loader refuses that checkpoint in load_state() with a
//   grammatical message that points to load_model;
// - save_model(dir, model, format) and load_model round-trip both formats.

#include "mpitrain/engine/model_weights.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../checkpoint/checkpoint_test_util.hpp"
#include "engine_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/mlp.hpp"

namespace mpitrain {
namespace {

namespace fs = std::filesystem;

const std::vector<std::size_t> kHidden = {16, 12};

nn::Sequential mlp(std::uint64_t seed) { return nn::make_mlp(8, kHidden, 4, nn::Activation::relu, 0.0f, seed); }

class ModelWeights : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};

  // Returns the parameters of a model trained for a few steps by an engine with a loader and
  // a scheduler, and the checkpoint folder it saved.
  std::vector<float> train_and_save(const fs::path& project, fs::path& folder) {
    data::SyntheticOptions o;
    o.size = 48 * static_cast<std::size_t>(comm_.size());
    o.feature_dim = 8;
    o.num_classes = 4;
    o.seed = 3;
    auto ds = std::make_shared<data::SyntheticDataset>(o);
    nn::Sequential model = mlp(7);
    nn::AdamW opt(model.parameters(), {});
    nn::LrScheduler scheduler = nn::make_scheduler("cosine", opt, 2, 6);
    data::DataLoaderOptions lo;
    lo.batch_size = 8;
    data::DataLoader loader(ds, lo);
    EngineConfig config;
    config.project.project_dir = project;
    Engine engine(config, comm_);
    engine.prepare(model, opt, loader, &scheduler);
    data::Batch b;
    while (engine.next_batch(b)) {
      engine.backward(nn::cross_entropy(model.forward(b.features), b.labels).grad);
      engine.step();
      engine.zero_grad();
    }
    folder = engine.save_state().dir;
    return testing::flatten(model.parameters());
  }
};

TEST_F(ModelWeights, ACheckpointFolderFillsAModelWithoutEngineLoaderOrScheduler) {
  checkpoint::testing::SharedTempDir project(comm_, "model_weights_checkpoint");
  fs::path folder;
  const std::vector<float> trained = train_and_save(project.path(), folder);
  nn::Sequential fresh = mlp(99);  // other initial values
  ASSERT_FALSE(testing::same_bits(testing::flatten(fresh.parameters()), trained));
  load_model(folder, fresh);
  EXPECT_TRUE(testing::same_bits(testing::flatten(fresh.parameters()), trained));
}

TEST_F(ModelWeights, LoadStateWithoutALoaderPointsToLoadModel) {
  checkpoint::testing::SharedTempDir project(comm_, "model_weights_load_state");
  fs::path folder;
  train_and_save(project.path(), folder);
  nn::Sequential model = mlp(7);
  nn::AdamW opt(model.parameters(), {});
  Engine engine({}, comm_);
  engine.prepare(model, opt);
  try {
    engine.load_state(folder);
    FAIL() << "loaded a checkpoint with a /data group into an engine without a loader";
  } catch (const checkpoint::CheckpointError& e) {
    // The engine prefixes each rank's message ("Engine::load_state(...) failed on rank(s)
    // ...: [rank r] "); the group's sentence is exact.
    const std::string sentence =
        "[rank " + std::to_string(comm_.rank()) +
        "] checkpoint group /data is saved, but this engine lacks a training loader passed to "
        "prepare() to restore it into (to load only the weights, use "
        "mpitrain::load_model(checkpoint folder, model))";
    EXPECT_NE(std::string(e.what()).find(sentence), std::string::npos) << e.what();
  }
}

TEST_F(ModelWeights, SaveModelAndLoadModelRoundTripBothFormats) {
  checkpoint::testing::SharedTempDir dir(comm_, "model_weights_files");
  nn::Sequential saved = mlp(7);
  for (const checkpoint::ModelFormat format : {checkpoint::ModelFormat::hdf5, checkpoint::ModelFormat::safetensors}) {
    const fs::path sub = dir.path() / ("rank" + std::to_string(comm_.rank()));
    const fs::path file = save_model(sub, saved, format);
    nn::Sequential loaded = mlp(99);
    load_model(file, loaded);
    EXPECT_TRUE(testing::same_bits(testing::flatten(loaded.parameters()), testing::flatten(saved.parameters())))
        << file;
  }
}

}  // namespace
}  // namespace mpitrain
