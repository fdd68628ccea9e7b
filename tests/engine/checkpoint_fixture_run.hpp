#pragma once
// The training setup of the committed checkpoint tests/engine/data/checkpoint_v1 (see
// data/README.md): checkpoint_fixture_writer made it, checkpoint_compat_test loads it. Both
// build the run from here, so the names, shapes and kinds the checkpoint holds are the ones
// the test's engine expects. Every group the Engine writes is present: /model, /optimizer
// (AdamW), /scheduler (cosine), /scaler (fp16), /engine, /data (a shuffled training loader),
// /custom/counter, /config, and each rank's /rng (the model's dropout stream).
//
// Changing anything here breaks the test against the committed checkpoint: that is the point.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/checkpoint/state_group.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/mlp.hpp"

namespace mpitrain::testing {

// A registered object: the number of optimizer steps the writer ran.
class FixtureCounter final : public checkpoint::Checkpointable {
 public:
  void save(checkpoint::H5Group& group) const override {
    checkpoint::StateGroup g;
    g.integers["value"] = value;
    checkpoint::write_state_group(group, g);
  }
  void load(const checkpoint::H5Group& group) override {
    value = checkpoint::read_state_group(group).integers.at("value");
  }
  std::int64_t value = 0;
};

// Model 6 -> 8 (ReLU, dropout 0.2) -> 3, AdamW, a cosine schedule with warm-up, fp16 with a
// scale that overflows and grows, and a shuffled loader of 4 examples per rank over 37.
struct FixtureRun {
  static constexpr std::size_t kFeatures = 6;
  static constexpr std::size_t kClasses = 3;
  static constexpr std::size_t kExamples = 37;
  static constexpr std::size_t kBatchPerRank = 4;

  FixtureRun(const Communicator& comm, const std::filesystem::path& project)
      : model(nn::make_mlp(kFeatures, std::vector<std::size_t>{8}, kClasses, nn::Activation::relu,
                           0.2f, 11)),
        optimizer(model.parameters(), {.lr = 1e-2, .weight_decay = 0.01}),
        scheduler(optimizer, nn::LrScheduleKind::cosine, 2, 20) {
    EngineConfig config;
    config.seed = 11;
    config.mixed_precision = Precision::fp16;
    config.loss_scaler.init_scale = 262144.0;  // grows to 2^19, overflows, backs off
    config.loss_scaler.growth_interval = 2;
    config.project.project_dir = project;
    engine = std::make_unique<Engine>(config, comm);
    data::SyntheticOptions d;
    d.size = kExamples;
    d.feature_dim = kFeatures;
    d.num_classes = kClasses;
    d.seed = 3;
    loader = std::make_unique<data::DataLoader>(engine->make_loader(
        std::make_shared<data::SyntheticDataset>(d),
        {.batch_size = kBatchPerRank, .shuffle = true, .seed = 2}));
    engine->prepare(model, optimizer, *loader, &scheduler);
    engine->register_for_checkpointing("counter", counter);
    engine->set_config_text("fixture: checkpoint_v1\n");
  }
  // Members are destroyed in reverse order: the engine first, before what it refers to.

  // Runs `steps` optimizer steps (skipped ones included), clipping at norm 1.
  void train(int steps) {
    data::Batch batch;
    Tensor grad;
    for (int s = 0; s < steps;) {
      if (!engine->next_batch(batch)) continue;
      nn::cross_entropy(model.forward(batch.features), batch.labels, grad);
      engine->backward(grad);
      engine->clip_grad_norm(1.0);
      engine->step();
      engine->zero_grad();
      ++counter.value;
      ++s;
    }
  }

  nn::Sequential model;
  nn::AdamW optimizer;
  nn::LrScheduler scheduler;
  FixtureCounter counter;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<Engine> engine;
};

}  // namespace mpitrain::testing
