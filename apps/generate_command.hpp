#pragma once
// `trainer generate --checkpoint PATH|latest --prompt TEXT --tokens N [--temperature T]
// [--seed S] --config run.yaml`: rank 0 continues TEXT with N bytes sampled from the config's
// language model (model.kind torchscript, model.task language_model) filled with the
// checkpoint's weights (checkpoint_argument.hpp), and prints the prompt and the continuation;
// the other ranks wait for its exit code. Errors: a bad --checkpoint or config exits 2,
// weights that do not fit the model exit 1, printed once.

#include <string>

#include "log.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "torchscript_model.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// Returns the exit code (0, 1 or 2) on every rank. Collective (one broadcast).
int generate_command_on_rank0(const TrainConfig& config, const std::string& checkpoint, const GenerateOptions& options,
                              const Communicator& comm, Log& log);

}  // namespace mpitrain::app
