// resume_worker: one training run of the exact-resume tests (resume_test.cmake starts it
// several times, each a fresh MPI job).
//
//   resume_worker --mode straight|first|resume --steps S --project DIR --out PREFIX
//
// straight: trains S optimizer steps from scratch.
// first:    trains S steps, then save_state() (the save falls in the middle of an epoch).
// resume:   load_state() (the newest checkpoint of DIR), then trains until S steps.
// Every rank writes PREFIX.rank<r>: one line per optimizer step (its number, the rank's mean
// micro-batch loss, the lr and loss scale it used, whether it was skipped) in hexadecimal
// floating point, so that equal lines mean bitwise equal values; "saved"/"loaded" lines with
// a hash of the parameters; and a final hash of every parameter and the registered counter.
//
// The run uses everything a checkpoint must carry: an MLP with dropout whose streams differ
// per rank, AdamW, a linear schedule with warm-up, fp16 with a dynamic loss scale that
// overflows and grows during the run, gradient accumulation over 2 micro-batches, clipping,
// a shuffled loader over a data set no batch size divides, and a registered object.

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mpitrain/checkpoint/state_group.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/mlp.hpp"

namespace {

using namespace mpitrain;

// Returns the FNV-1a 64-bit hash of the bytes of `values`.
std::uint64_t hash_floats(std::span<const float> values, std::uint64_t h = 1469598103934665603ULL) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (std::size_t i = 0; i < values.size_bytes(); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ULL;
  }
  return h;
}

std::uint64_t hash_parameters(const Engine& engine) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const nn::Parameter* p : engine.parameters()) h = hash_floats(p->value.span(), h);
  return h;
}

// A registered object: counts the optimizer steps this program ran (restored on resume).
class StepCounter final : public checkpoint::Checkpointable {
 public:
  void save(checkpoint::H5Group& group) const override {
    checkpoint::StateGroup g;
    g.integers["count"] = count;
    checkpoint::write_state_group(group, g);
  }
  void load(const checkpoint::H5Group& group) override {
    count = checkpoint::read_state_group(group).integers.at("count");
  }
  std::int64_t count = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string mode, project, out;
  std::int64_t steps = 0;
  CLI::App app("one run of the exact-resume test");
  app.add_option("--mode", mode)->required()->check(CLI::IsMember({"straight", "first", "resume"}));
  app.add_option("--steps", steps)->required();
  app.add_option("--project", project)->required();
  app.add_option("--out", out)->required();
  CLI11_PARSE(app, argc, argv);

  try {
    MpiRuntime runtime(&argc, &argv);
    Communicator comm(runtime);

    // The model, optimizer and scheduler outlive the engine (declared before it).
    const std::uint64_t seed = 77;
    const std::size_t features = 24, classes = 5;
    nn::Sequential model = nn::make_mlp(features, std::vector<std::size_t>{48, 48}, classes,
                                        nn::Activation::relu, 0.1f, seed);
    nn::AdamW optimizer(model.parameters(), {.lr = 3e-3, .weight_decay = 0.01});
    nn::LrScheduler scheduler(optimizer, nn::LrScheduleKind::linear, 5, 60);
    StepCounter counter;

    EngineConfig config;
    config.seed = seed;
    config.gradient_accumulation_steps = 2;
    config.mixed_precision = Precision::fp16;
    // A scale far too large at first (overflows, backs off) that grows every 4 clean steps
    // (overflows again): the scaler's whole state matters for the continuation.
    config.loss_scaler.init_scale = 16777216.0;
    config.loss_scaler.growth_interval = 4;
    config.project.project_dir = project;
    Engine engine(config, comm);

    data::SyntheticOptions data_options;
    data_options.size = 1001;
    data_options.feature_dim = features;
    data_options.num_classes = classes;
    data_options.seed = 5;
    auto dataset = std::make_shared<data::SyntheticDataset>(data_options);
    data::DataLoader loader =
        engine.make_loader(dataset, {.batch_size = 12, .shuffle = true, .seed = 9});
    engine.prepare(model, optimizer, loader, &scheduler);
    engine.register_for_checkpointing("counter", counter);

    std::FILE* log = std::fopen((out + ".rank" + std::to_string(comm.rank())).c_str(), "w");
    if (log == nullptr) throw std::runtime_error("cannot write " + out);
    if (mode == "resume") {
      const Engine::LoadReport report = engine.load_state();
      std::fprintf(log, "loaded %016llx\n", static_cast<unsigned long long>(hash_parameters(engine)));
      for (const std::string& w : report.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    }

    double loss_sum = 0.0;
    int micro = 0;
    data::Batch batch;
    Tensor grad;
    while (static_cast<std::int64_t>(engine.step_count()) < steps) {
      if (!engine.next_batch(batch)) continue;  // next epoch
      auto micro_step = engine.accumulate();
      const Tensor logits = model.forward(batch.features);
      loss_sum += nn::cross_entropy(logits, batch.labels, grad);
      ++micro;
      engine.backward(grad);
      if (!engine.sync_gradients()) continue;
      const float scale = engine.loss_scale();
      const double lr = optimizer.lr();
      engine.clip_grad_norm(1.0);
      const bool stepped = engine.step();
      engine.zero_grad();
      ++counter.count;
      std::fprintf(log, "step %llu loss %a lr %a scale %a stepped %d\n",
                   static_cast<unsigned long long>(engine.step_count()), loss_sum / micro, lr,
                   static_cast<double>(scale), stepped ? 1 : 0);
      loss_sum = 0.0;
      micro = 0;
    }
    if (mode == "first") {
      const checkpoint::SaveResult saved = engine.save_state();
      std::fprintf(log, "saved %016llx in %s\n", static_cast<unsigned long long>(hash_parameters(engine)),
                   saved.dir.filename().c_str());
    }
    std::fprintf(log, "final parameters %016llx counter %lld skipped %llu samples %llu epoch %llu\n",
                 static_cast<unsigned long long>(hash_parameters(engine)),
                 static_cast<long long>(counter.count),
                 static_cast<unsigned long long>(engine.state().skipped_steps),
                 static_cast<unsigned long long>(engine.samples_seen()),
                 static_cast<unsigned long long>(engine.epoch()));
    std::fclose(log);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resume_worker: %s\n", e.what());
    return 1;
  }
}
