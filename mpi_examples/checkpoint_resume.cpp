// Checkpoints that survive preemption: save every few steps, resume from the newest
// checkpoint when the job starts again, and lose no step.
//
//   mpirun -np 2 ./checkpoint_resume PROJECT_DIR [stop_at_step]
//
// The program trains an MLP on a synthetic problem for kTotalSteps optimizer steps with
// AdamW, a cosine schedule and fp16 loss scaling. It saves a checkpoint every kSaveEvery
// steps into PROJECT_DIR/checkpoints/checkpoint_<N> (automatic naming, at most 3 kept).
// When it starts and a committed checkpoint exists, it continues from there: parameters,
// optimizer moments, schedule, loss scale, data order and position, per-rank dropout streams.
// `stop_at_step` simulates a preemption: the run saves and exits there; running the same
// command again finishes the job. A resumed job ends with exactly the parameters of an
// uninterrupted one: the example checks it by training a reference in memory on the side.
// Exit code 0 when the run finished and matched the reference bit for bit (or stopped as
// asked after saving).

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/mlp.hpp"

using namespace mpitrain;

namespace {

constexpr std::uint64_t kTotalSteps = 120;
constexpr std::uint64_t kSaveEvery = 25;

// One training setup; `project` empty: no checkpoints (the in-memory reference).
struct Training {
  Training(const Communicator& comm, const std::filesystem::path& project)
      : model(nn::make_mlp(16, std::vector<std::size_t>{64, 64}, 4, nn::Activation::relu, 0.1f, 3)),
        optimizer(model.parameters(), {.lr = 3e-3}),
        scheduler(optimizer, nn::LrScheduleKind::cosine, 10, kTotalSteps) {
    EngineConfig config;
    config.seed = 3;
    config.mixed_precision = Precision::fp16;
    config.project.project_dir = project.empty() ? std::filesystem::path("unused") : project;
    config.project.total_limit = 3;
    engine = std::make_unique<Engine>(config, comm);
    auto data = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions{.size = 1000, .feature_dim = 16, .num_classes = 4, .seed = 9});
    loader = std::make_unique<data::DataLoader>(engine->make_loader(data, {.batch_size = 16, .seed = 1}));
    engine->prepare(model, optimizer, *loader, &scheduler);
  }

  // Trains until `until` optimizer steps; calls `after_step` after each one.
  template <class F>
  void train(std::uint64_t until, F&& after_step) {
    Tensor grad;
    data::Batch batch;
    while (engine->step_count() < until) {
      if (!engine->next_batch(batch)) continue;  // next epoch
      nn::cross_entropy(model.forward(batch.features), batch.labels, grad);
      engine->backward(grad);
      engine->step();
      engine->zero_grad();
      after_step();
    }
  }

  // Declared before the engine, so they outlive it.
  nn::Sequential model;
  nn::AdamW optimizer;
  nn::LrScheduler scheduler;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<Engine> engine;
};

}  // namespace

int main(int argc, char** argv) try {
  MpiRuntime runtime(&argc, &argv);
  Communicator comm(runtime);
  if (argc < 2) {
    if (comm.rank() == 0) std::fprintf(stderr, "usage: checkpoint_resume PROJECT_DIR [stop_at_step]\n");
    return 2;
  }
  const std::filesystem::path project = argv[1];
  const std::uint64_t stop_at = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : kTotalSteps;

  Training run(comm, project);
  Engine& engine = *run.engine;
  // Every rank asks the same question; rank 0's listing decides for all (load_state()).
  const bool have_checkpoint = engine.reduce(engine.checkpoints().latest() ? 1.0 : 0.0, ReduceOp::max) > 0;
  if (have_checkpoint) {
    const Engine::LoadReport loaded = engine.load_state();
    engine.print("resumed from " + loaded.dir.filename().string() + " at step " +
                 std::to_string(engine.step_count()));
  }
  run.train(std::min(stop_at, kTotalSteps), [&] {
    if (engine.step_count() % kSaveEvery == 0) {
      engine.print("step " + std::to_string(engine.step_count()) + ": saved " +
                   engine.save_state().dir.filename().string());
    }
  });
  if (engine.step_count() < kTotalSteps) {
    engine.save_state();  // preempted: save where we are, the next start continues here
    engine.print("stopped at step " + std::to_string(engine.step_count()) + "; run again to finish");
    return 0;
  }

  // The uninterrupted reference, trained in memory without any checkpoint.
  Training reference(comm, {});
  reference.train(kTotalSteps, [] {});
  bool same = true;
  for (std::size_t k = 0; k < engine.parameters().size(); ++k) {
    const Tensor& a = engine.parameters()[k]->value;
    const Tensor& b = reference.engine->parameters()[k]->value;
    same = same && std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)) == 0;
  }
  engine.print(std::string("finished at step ") + std::to_string(engine.step_count()) + ": parameters " +
               (same ? "equal" : "DIFFER FROM") + " an uninterrupted run, bit for bit");
  return same ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "checkpoint_resume: %s\n", e.what());
  return 1;
}
