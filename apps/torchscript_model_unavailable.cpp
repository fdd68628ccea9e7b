// model.kind torchscript in a trainer built without libtorch (MPITRAIN_TORCH off or
// libtorch not found): a config error naming the key.

#include "torchscript_model.hpp"

namespace mpitrain::app {

std::unique_ptr<ExternalModel> make_torchscript_model(const TrainConfig& config, std::size_t, std::size_t) {
  throw ConfigError(config.origin("model.kind") +
                    ": model.kind: torchscript needs libtorch, and this trainer was built without libtorch "
                    "(configure with -DMPITRAIN_TORCH=ON and libtorch-dev installed)");
}

std::string generate_text(const TrainConfig& config, const std::filesystem::path&, const GenerateOptions&) {
  make_torchscript_model(config, 0, 0);  // the same config error
  return {};
}

}  // namespace mpitrain::app
