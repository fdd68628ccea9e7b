#pragma once
// Checkpointable: an object registered for checkpointing (Accelerate's
// register_for_checkpointing). Rank 0 saves it under /custom/<name> of state.h5; loading
// restores it from there, after the whole checkpoint was verified and read. Loading is
// all-or-nothing for these objects too: before restoring any, the engine saves each into
// memory with save() (CheckpointableSnapshot); if loading fails on any rank, every object
// whose load() ran is given that snapshot back through load(). So load() must accept what
// save() writes, and may run twice in one failed Engine::load_state.

#include "mpitrain/checkpoint/h5_file.hpp"

namespace mpitrain::checkpoint {

class Checkpointable {
 public:
  virtual ~Checkpointable() = default;
  // Writes the object's state into `group` (created empty for it). write_state_group()
  // of state_group.hpp is the easy way for named tensors and numbers.
  virtual void save(H5Group& group) const = 0;
  // Restores the state from `group`. Should read everything before changing the object, so
  // that a malformed group leaves it as it was.
  virtual void load(const H5Group& group) = 0;
};

}  // namespace mpitrain::checkpoint
