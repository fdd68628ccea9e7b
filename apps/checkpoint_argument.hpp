#pragma once
// The --checkpoint PATH|latest argument of `trainer eval` and `trainer export`:
//   latest  the newest committed checkpoint of project.dir/checkpoints (checkpoint_<N> of the
//           largest N, or step_<S> of the largest S with automatic_checkpoint_naming: false;
//           the newest of the other naming when the folder holds only that kind)
//   PATH    a checkpoint folder, or a weights file (.h5 or .safetensors, as save_model
//           writes them)
// Local listing, no MPI.

#include <filesystem>
#include <string>

#include "train_config.hpp"

namespace mpitrain::app {

// Returns the folder or file `argument` names; throws ConfigError (exit 2) naming the
// argument when there is no checkpoint to take or the path does not exist.
std::filesystem::path resolve_checkpoint_argument(const TrainConfig& config, const std::string& argument);

}  // namespace mpitrain::app
