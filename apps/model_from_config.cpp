#include "model_from_config.hpp"

#include <vector>

#include "classification_objective.hpp"
#include "config_checked.hpp"
#include "language_model_objective.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "torchscript_model.hpp"

namespace mpitrain::app {
namespace {

Model make_mlp_model(const TrainConfig& config, std::size_t features, std::size_t classes) {
  const MlpConfig& mlp = config.model.mlp;
  const std::vector<std::size_t> hidden(mlp.hidden.begin(), mlp.hidden.end());
  Model model;
  model.module = config_checked("model", [&] {
    return std::make_unique<nn::Sequential>(
        nn::make_mlp(features, hidden, classes, nn::parse_activation(mlp.activation),
                     static_cast<float>(mlp.dropout), static_cast<std::uint64_t>(config.seed)));
  });
  model.objective = std::make_unique<ClassificationObjective>();
  return model;
}

Model make_torchscript(const TrainConfig& config, std::size_t features, std::size_t classes) {
  Model model;
  model.external = make_torchscript_model(config, features, classes);
  if (config.model.torchscript.task == "language_model") {
    model.objective = std::make_unique<LanguageModelObjective>(classes, config.data.kind == "text" ? "byte" : "token");
  } else {
    model.objective = std::make_unique<ClassificationObjective>();
  }
  return model;
}

}  // namespace

Model make_model(const TrainConfig& config, std::size_t features, std::size_t classes) {
  if (config.model.kind == "mlp") return make_mlp_model(config, features, classes);
  if (config.model.kind == "torchscript") return make_torchscript(config, features, classes);
  throw ConfigError(config.origin("model.kind") + ": model.kind: unknown model kind '" +
                    config.model.kind + "' (known: mlp, torchscript)");
}

}  // namespace mpitrain::app
