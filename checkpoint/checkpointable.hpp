#pragma once
// Checkpointable: an object registered for checkpointing (Accelerate's
// register_for_checkpointing). Rank 0 saves it under /custom/<name> of state.h5; loading
// restores it from there, after the whole checkpoint was verified and read.

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
