#pragma once
// The checkpoint folders of a project's checkpoints/ as the trainer names them:
// checkpoint_<N> (automatic naming, DESIGN.md section 5) and step_<S>, where S is the
// optimizer step (project.automatic_checkpoint_naming: false). The checkpoint library lists
// the first kind; `trainer checkpoints list|verify` and the trainer's start-up checks need
// both. Local directory listings, no MPI.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mpitrain::app {

struct CheckpointFolder {
  enum class Naming { automatic, step };
  Naming naming = Naming::automatic;
  std::int64_t number = 0;  // N of checkpoint_<N>, or S of step_<S>
  std::filesystem::path dir;
  bool committed = false;   // holds MANIFEST.json
};

// Returns "step_<S>".
std::string step_folder_name(std::int64_t step);
// Returns S when `name` is exactly "step_<S>" (decimal digits, no sign, no leading zeros
// except "0", within int64), otherwise nothing.
std::optional<std::int64_t> parse_step_folder_name(std::string_view name);

// Returns every folder step_<S> of `checkpoints_dir`, committed or not, in increasing S.
// Returns an empty list when the folder does not exist; throws std::filesystem_error when it
// cannot be listed.
std::vector<CheckpointFolder> step_folders(const std::filesystem::path& checkpoints_dir);
// Returns the committed checkpoints of `checkpoints_dir`: checkpoint_<N> in increasing N,
// then step_<S> in increasing S.
std::vector<CheckpointFolder> committed_checkpoint_folders(const std::filesystem::path& checkpoints_dir);

}  // namespace mpitrain::app
