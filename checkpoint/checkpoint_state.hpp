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
// Which groups there are and what they hold is the engine's (its table of checkpoint groups,
// engine/engine_checkpoint_groups.cpp; DESIGN.md section 5): this module stores any plain
// group name except "custom" and "config", and the engine refuses names it does not know.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "mpitrain/checkpoint/checkpointable.hpp"
#include "mpitrain/checkpoint/state_group.hpp"

namespace mpitrain::checkpoint {

struct CheckpointState {
  // Replicated state by group name: a plain name (no '/'); "custom" and "config" (reserved
  // for `custom` and `config_yaml`) are refused when saving.
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
  std::int64_t zero_stage = 0;  // the optimizer layout (Manifest::zero_stage)
};

}  // namespace mpitrain::checkpoint
