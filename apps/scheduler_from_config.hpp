#pragma once
// The trainer's learning-rate scheduler from the `scheduler.*` keys: scheduler.kind constant,
// linear or cosine after scheduler.warmup_steps of linear warm-up (nn/lr_scheduler.hpp),
// sized by the run's total number of optimizer steps.

#include <cstdint>

#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/optimizer.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// Returns the scheduler of `config.scheduler` for `optimizer` (which must outlive it) over a
// run of `total_steps` optimizer steps. Throws ConfigError naming scheduler.kind for an
// unknown kind, or "scheduler: ..." for a setting the scheduler refuses.
nn::LrScheduler make_scheduler(const TrainConfig& config, nn::Optimizer& optimizer, std::int64_t total_steps);

}  // namespace mpitrain::app
