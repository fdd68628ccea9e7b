// model.kind torchscript (and trainer generate) in a trainer built without libtorch
// (MPITRAIN_TORCH off or libtorch not found): a config error naming the key.

#include "torchscript_model.hpp"

namespace mpitrain::app {

std::unique_ptr<ExternalModel> make_torchscript_model(const TrainConfig& config, std::size_t, std::size_t) {
  throw ConfigError(config.origin("model.kind") +
                    ": model.kind: torchscript needs libtorch, and this trainer was built without libtorch "
                    "(configure with -DMPITRAIN_TORCH=ON and libtorch-dev installed)");
}

std::string generate_text(const TrainConfig& config, const std::filesystem::path&, const GenerateOptions&) {
  if (config.model.kind != "torchscript" || config.model.torchscript.task != "language_model") {
    throw ConfigError(config.origin("model.task") +
                      ": model.task: trainer generate needs model.kind torchscript with model.task language_model");
  }
  make_torchscript_model(config, 0, 0);  // throws the config error above
  return {};
}

}  // namespace mpitrain::app
