#pragma once
// The trainer's learning-rate scheduler from the `scheduler.*` keys: scheduler.kind constant,
// linear or cosine after scheduler.warmup_steps of linear warm-up (nn/lr_scheduler.hpp),
// sized by the run's total number of optimizer steps.

#include <cstdint>

#include "mpitrain/checkpoint/checkpointable.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/optimizer.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// Returns the scheduler of `config.scheduler` for `optimizer` (which must outlive it) over a
// run of `total_steps` optimizer steps. Throws ConfigError naming scheduler.kind for an
// unknown kind, or "scheduler: ..." for a setting the scheduler refuses.
nn::LrScheduler make_scheduler(const TrainConfig& config, nn::Optimizer& optimizer, std::int64_t total_steps);

// A scheduler's state dict as an object registered for checkpointing (Engine::
// register_for_checkpointing, /custom/<name>): for a model the engine does not prepare
// itself (an ExternalModel), whose scheduler the engine does not save under /scheduler.
class SchedulerCheckpoint final : public checkpoint::Checkpointable {
 public:
  explicit SchedulerCheckpoint(nn::LrScheduler& scheduler) : scheduler_(scheduler) {}
  void save(checkpoint::H5Group& group) const override;
  // All-or-nothing: LrScheduler::load_state_dict checks every key first.
  void load(const checkpoint::H5Group& group) override;

 private:
  nn::LrScheduler& scheduler_;
};

}  // namespace mpitrain::app
