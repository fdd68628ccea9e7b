#pragma once
// EngineCheckpointGroup: the declaration of one checkpoint group the Engine owns; the table
// of them is Engine::checkpoint_groups() (engine/engine_checkpoint_groups.cpp).
// Implementation-only: not installed.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/checkpoint/state_group.hpp"
#include "mpitrain/engine/engine.hpp"

namespace mpitrain {

// One group of a checkpoint: where it is stored, what the engine must have for it, and how
// it is captured from the live objects, checked against them and applied to them. A group
// is saved when present() and must then be in the checkpoint; a checkpoint holding a group
// the engine does not have (or lacking one it has) is refused, naming `needs`.
struct EngineCheckpointGroup {
  enum class Scope { replicated, per_rank };  // state.h5 (rank 0's), or each rank_<r>.h5

  std::string_view name;   // the group: /<name>
  Scope scope;
  std::string_view needs;  // what the engine needs to have the group, e.g. "a scheduler
                           // passed to prepare()"
  // Returns whether this engine has the state.
  bool (*present)(const Engine& engine);
  // Returns the group as the live objects hold it (the model as views when `views`).
  checkpoint::StateGroup (*capture)(const Engine& engine, bool views);
  // Throws checkpoint::CheckpointError naming the group when `saved` cannot be applied to
  // this engine, whose own state is `current` (names, shapes, kinds, sizes).
  void (*check)(const Engine& engine, const checkpoint::StateGroup& saved,
                const checkpoint::StateGroup& current);
  // Copies `saved` into the live objects; adds what it could not restore exactly to
  // `warnings`. Runs only after every group's check passed; a throw is rolled back by
  // load_state.
  void (*apply)(Engine& engine, const checkpoint::StateGroup& saved,
                std::vector<std::string>& warnings);
};

}  // namespace mpitrain
