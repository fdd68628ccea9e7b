#pragma once
// A previous run in project.dir: what a fresh run (project.resume: none) would mix with.
// Its metrics.jsonl would gain a second run's lines (duplicate steps) and its checkpoint
// numbering would carry on, so the trainer refuses such a run at start (ConfigError, exit 2)
// unless project.overwrite: true, which removes the previous run first. Local file system
// calls on the caller's rank (rank 0), no MPI.

#include <filesystem>
#include <string>
#include <vector>

#include "train_config.hpp"

namespace mpitrain::app {

// Returns what of an earlier run `dir` holds, relative to it: "metrics.jsonl" (when not
// empty), then the committed checkpoint folders ("checkpoints/checkpoint_0", then
// "checkpoints/step_40"); empty when there is none (or `dir` does not exist).
std::vector<std::string> previous_run_files(const std::filesystem::path& dir);

// Returns the error for a fresh run into project.dir holding `found` (not empty): it names
// them and says how to resume, choose another project.dir, or overwrite.
std::string previous_run_message(const TrainConfig& config, const std::vector<std::string>& found);

// Removes the earlier run's files from `dir` (project.overwrite: true): metrics.jsonl,
// checkpoints/ with everything in it, model.h5 and model.safetensors. Returns the names
// removed, relative to `dir`. Other files are left alone.
std::vector<std::string> remove_previous_run(const std::filesystem::path& dir);

}  // namespace mpitrain::app
