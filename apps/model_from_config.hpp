#pragma once
// The trainer's model from the `model.*` keys: model.kind picks the kind, which reads its own
// keys (TrainConfig::model) and chooses the loss and the evaluation metric (Objective).
//   mlp: nn::make_mlp(features, model.hidden, classes, model.activation, model.dropout,
//        seed), cross-entropy, accuracy.
//   torchscript: the module of model.path (torchscript_model.hpp), trained through libtorch
//        as an ExternalModel; model.task classification: cross-entropy, accuracy.
// A new kind is its branch in make_model, its keys (train_config.hpp, config_schema.cpp)
// and its test (tests/apps/model_from_config_test.cpp).

#include <cstddef>
#include <memory>

#include "external_model.hpp"
#include "mpitrain/nn/module.hpp"
#include "objective.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// Exactly one of module and external is set.
struct Model {
  std::unique_ptr<nn::Module> module;         // what the engine prepares and trains (mlp)
  std::unique_ptr<ExternalModel> external;    // a model that prepares itself (torchscript)
  std::unique_ptr<const Objective> objective;  // its loss and evaluation metric
};

// Returns the model of `config.model` for examples of `features` values and `classes`
// classes, initialised from `config.seed` (the same on every rank). Throws ConfigError
// naming model.kind for an unknown kind, or "model: ..." for a setting the model refuses.
Model make_model(const TrainConfig& config, std::size_t features, std::size_t classes);

}  // namespace mpitrain::app
