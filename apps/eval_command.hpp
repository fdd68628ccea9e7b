#pragma once
// `trainer eval --config run.yaml --checkpoint PATH|latest`: evaluation only. The model of
// the config (model.*) is filled with the checkpoint's weights (load_model: a checkpoint
// folder's /model group, verified against its manifest, or a weights file) and scored on
// the config's test set exactly as training scores it after an epoch (apps/evaluation.hpp),
// at any world size: no training loader, optimizer state or scheduler is read. A torchscript
// model is prepared on the engine first and filled by torch name (checkpoint::read_model,
// ExternalModel::load_weights: a tensor missing or of another shape is a runtime error). Rank 0 prints
//   eval <path>: test accuracy 88.63%, loss 0.3219 (10000 examples, 2 ranks)
// Collective: every rank calls it. Throws ConfigError (no test set, bad --checkpoint) and
// CheckpointError (a damaged checkpoint, names or shapes that do not fit the model).

#include <cstdio>
#include <string>

#include "log.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

struct EvalOutcome {
  double metric = 0.0;  // mlp: accuracy in [0, 1]
  double loss = 0.0;
  std::int64_t samples = 0;
};

// Returns the evaluation of the checkpoint `argument` names (checkpoint_argument.hpp).
EvalOutcome eval_command(const TrainConfig& config, const std::string& argument, const Communicator& comm,
                         Log& log);

}  // namespace mpitrain::app
