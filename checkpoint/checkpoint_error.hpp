#pragma once
// CheckpointError: every failure of the checkpoint module (HDF5 calls, file system calls,
// malformed or corrupted checkpoints, ranks that disagree). The message names the file, the
// object inside it when there is one, and the call that failed.

#include <stdexcept>
#include <string>

namespace mpitrain::checkpoint {

class CheckpointError : public std::runtime_error {
 public:
  explicit CheckpointError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace mpitrain::checkpoint
