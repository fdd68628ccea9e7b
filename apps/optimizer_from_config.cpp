#include "optimizer_from_config.hpp"

#include "config_checked.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/sgd.hpp"

namespace mpitrain::app {

std::unique_ptr<nn::Optimizer> make_optimizer(const TrainConfig& config, std::vector<nn::Parameter*> params) {
  const auto& o = config.optimizer;
  if (o.kind == "sgd") {
    nn::SgdOptions s;
    s.lr = o.lr;
    s.momentum = o.momentum;
    s.weight_decay = o.weight_decay;
    s.nesterov = o.nesterov;
    return config_checked("optimizer", [&] { return std::make_unique<nn::Sgd>(std::move(params), s); });
  }
  if (o.kind == "adamw") {
    nn::AdamWOptions a;
    a.lr = o.lr;
    a.betas = {o.betas.at(0), o.betas.at(1)};
    a.eps = o.eps;
    a.weight_decay = o.weight_decay;
    return config_checked("optimizer", [&] { return std::make_unique<nn::AdamW>(std::move(params), a); });
  }
  throw ConfigError(config.origin("optimizer.kind") + ": optimizer.kind: unknown optimizer '" + o.kind +
                    "' (known: adamw, sgd)");
}

}  // namespace mpitrain::app
