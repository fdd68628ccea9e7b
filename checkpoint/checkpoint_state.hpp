#pragma once
// CheckpointState: everything one checkpoint holds, independent of the engine. The engine
// fills it to save and receives a new one when loading (it never reads into live objects
// half-way: loading is all-or-nothing).
//
// state.h5 (written by rank 0): root attributes format_version, mpitrain_version, world_size;
//   one group per `replicated` entry ("/model", "/optimizer", ...; see state_group.hpp for
//   the mapping), "/custom/<name>" per registered object, and the string dataset "/config".
// rank_<r>.h5 (written by rank r): root attributes format_version, mpitrain_version,
//   world_size, rank; one group per `per_rank` entry (e.g. "/rng").
//
// What the engine puts in the groups (DESIGN.md section 5):
//   model      tensors "<param name>"                     fp32, torch shapes
//   optimizer  tensors "<param name>/<slot>" (exp_avg, exp_avg_sq, momentum_buffer),
//              hyper-parameters as scalars ("lr", "<param name>/step" ...)
//   scheduler  scalars/integers
//   scaler     scale (scalar), growth_tracker, hysteresis, skipped_steps (integers)
//   engine     step, micro_step, epoch, batches_in_epoch, samples_seen (integers)
//   data       seed, epoch, position (integers)

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "mpitrain/checkpoint/checkpointable.hpp"
#include "mpitrain/checkpoint/state_group.hpp"

namespace mpitrain::checkpoint {

struct CheckpointState {
  // Replicated state by group name: one of kReplicatedGroups below. Other names, and
  // "custom" (reserved for `custom`), are refused when saving.
  std::map<std::string, StateGroup> replicated;
  // Registered objects by name (a plain name, no '/'): saved under /custom/<name>. Saving
  // only; a loaded checkpoint restores them with LoadedCheckpoint::restore.
  std::map<std::string, const Checkpointable*> custom;
  // The YAML text of the run's configuration (/config).
  std::string config_yaml;
  // This rank's own state by group name (any plain names, e.g. "rng").
  std::map<std::string, StateGroup> per_rank;
  // Recorded in MANIFEST.json.
  std::int64_t step = 0;
  std::int64_t epoch = 0;
};

// The group names `replicated` may use.
inline constexpr std::string_view kReplicatedGroups[] = {"model",  "optimizer", "scheduler",
                                                         "scaler", "engine",    "data"};

}  // namespace mpitrain::checkpoint
