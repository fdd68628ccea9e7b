#pragma once
// `trainer export --checkpoint PATH|latest --format h5|safetensors --output FILE`: the
// weights of a checkpoint folder (its /model group, verified against the manifest) or of a
// weights file, written to FILE in the given format (checkpoint::save_model_file: PyTorch
// names and shapes; safetensors with __metadata__ {"format": "pt"}). No model is built, so
// --config matters only for `latest` (project.dir). Needs no MPI: the trainer runs it on
// rank 0 and gives the exit code to every rank.

#include <cstdio>
#include <filesystem>
#include <string>

#include "log.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// Returns the written file. Throws ConfigError for a bad --checkpoint or --format, or an
// --output whose extension names another format (before anything is written), and
// CheckpointError for a damaged or unreadable source.
std::filesystem::path export_command(const TrainConfig& config, const std::string& argument,
                                     const std::string& format, const std::filesystem::path& output,
                                     Log& log);

// Returns the exit code of the command run on rank 0 alone: 0; 2 for a ConfigError; 1 for
// any other failure (rank 0 logs the error "trainer export: <message>"). Rank 0 reaches
// the broadcast of the code whatever happens, so every rank returns it and none waits.
int export_command_on_rank0(const TrainConfig& config, const std::string& argument, const std::string& format,
                            const std::filesystem::path& output, const Communicator& comm, Log& log);

}  // namespace mpitrain::app
