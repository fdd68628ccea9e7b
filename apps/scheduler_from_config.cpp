#include "scheduler_from_config.hpp"

#include "config_checked.hpp"
#include "mpitrain/checkpoint/state_group.hpp"

namespace mpitrain::app {

nn::LrScheduler make_scheduler(const TrainConfig& config, nn::Optimizer& optimizer, std::int64_t total_steps) {
  const nn::LrScheduleKind kind = config_checked(config.origin("scheduler.kind") + ": scheduler.kind", [&] {
    return nn::parse_lr_schedule_kind(config.scheduler.kind);
  });
  return config_checked("scheduler", [&] {
    return nn::LrScheduler(optimizer, kind, config.scheduler.warmup_steps, total_steps);
  });
}

void SchedulerCheckpoint::save(checkpoint::H5Group& group) const {
  checkpoint::write_state_group(group, checkpoint::StateGroup::from_state_dict(scheduler_.state_dict()));
}

void SchedulerCheckpoint::load(const checkpoint::H5Group& group) {
  scheduler_.load_state_dict(checkpoint::read_state_group(group).to_state_dict());
}

}  // namespace mpitrain::app
