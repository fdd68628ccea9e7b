#include "scheduler_from_config.hpp"

#include "config_checked.hpp"

namespace mpitrain::app {

nn::LrScheduler make_scheduler(const TrainConfig& config, nn::Optimizer& optimizer, std::int64_t total_steps) {
  const nn::LrScheduleKind kind = config_checked(config.origin("scheduler.kind") + ": scheduler.kind", [&] {
    return nn::parse_lr_schedule_kind(config.scheduler.kind);
  });
  return config_checked("scheduler", [&] {
    return nn::LrScheduler(optimizer, kind, config.scheduler.warmup_steps, total_steps);
  });
}

}  // namespace mpitrain::app
