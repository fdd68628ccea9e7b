#pragma once
// CheckpointableSnapshot: a copy of a registered object's state, taken with its own
// Checkpointable::save into an HDF5 file that lives in memory only, and put back with its
// Checkpointable::load. Engine::load_state takes one of every registered object before it
// restores any of them, so that a failure on any rank puts every object back as it was
// (loading is all-or-nothing for registered objects too, not only for the engine's state).
//
// Cost: one save() of the object into memory (its state plus HDF5 metadata; the image is
// allocated in steps of 1 MiB), and one load() to restore.

#include <string>

#include "mpitrain/checkpoint/checkpointable.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"

namespace mpitrain::checkpoint {

class CheckpointableSnapshot {
 public:
  // Saves `object` into memory; `name` is the object's registered name (for messages).
  // Throws what save() throws, prefixed with the name.
  CheckpointableSnapshot(std::string name, const Checkpointable& object);

  // Loads the saved state into `object` (the one it was taken from). Can be called more
  // than once. Throws CheckpointError naming the object when its load() fails.
  void restore(Checkpointable& object) const;

  const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
  H5File file_;
};

}  // namespace mpitrain::checkpoint
