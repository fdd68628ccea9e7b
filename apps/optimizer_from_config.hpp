#pragma once
// The trainer's optimizer from the `optimizer.*` keys: optimizer.kind adamw (lr, betas, eps,
// weight_decay: decoupled) or sgd (lr, momentum, nesterov, weight_decay: L2), with torch.optim
// semantics (nn/adamw.hpp, nn/sgd.hpp).

#include <memory>
#include <vector>

#include "mpitrain/nn/optimizer.hpp"
#include "mpitrain/nn/parameter.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// Returns the optimizer of `config.optimizer` over `params` (which must outlive it). Throws
// ConfigError naming optimizer.kind for an unknown kind, or "optimizer: ..." for a setting
// the optimizer refuses.
std::unique_ptr<nn::Optimizer> make_optimizer(const TrainConfig& config, std::vector<nn::Parameter*> params);

}  // namespace mpitrain::app
