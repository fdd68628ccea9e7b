#pragma once
// TorchOptimizer: a torch::optim::Optimizer (Adam, AdamW, SGD) seen by the Engine as an
// nn::Optimizer (Engine::set_optimizer): step() steps the torch optimizer, and its state
// dict is what a checkpoint stores under /optimizer, by the engine's parameter names.
// TorchModel creates one; use it directly only to checkpoint a torch optimizer yourself.
//
// State dict (nn::Optimizer's convention): hyper-parameters of param group 0 as scalars by
// torch's names ("lr", "betas.0", "betas.1", "eps", "weight_decay", "amsgrad" for Adam and
// AdamW; "lr", "momentum", "dampening", "weight_decay", "nesterov" for SGD; booleans 0/1),
// those of group g > 0 as "group<g>.<name>"; per parameter with state (torch creates it
// lazily, at its first step): "<name>/step" (Adam, AdamW), tensors "<name>/exp_avg",
// "<name>/exp_avg_sq", "<name>/max_exp_avg_sq" (amsgrad), "<name>/momentum_buffer" (SGD
// with momentum). fp32 state only, so save and load are exact.

#include <string>
#include <unordered_map>
#include <vector>

#include "mpitrain/nn/optimizer.hpp"
#include "mpitrain/tensor/state_dict.hpp"

namespace torch::optim {
class Optimizer;
}

namespace mpitrain::libtorch {

class TorchOptimizer : public nn::Optimizer {
 public:
  // `names`: the name of every parameter the optimizer holds, by its TensorImpl address.
  // `fused`: step an AdamW with mpitrain's one-pass kernel (see step()).
  // Throws std::invalid_argument for an optimizer other than Adam, AdamW or SGD, or a
  // parameter of it that `names` lacks.
  TorchOptimizer(torch::optim::Optimizer& optimizer,
                 std::unordered_map<const void*, std::string> names, bool fused = true);

  // Steps the torch optimizer (which reads the .grad views of the buckets). A
  // torch::optim::AdamW whose parameters, gradients and moments are contiguous fp32 CPU
  // tensors is stepped, when `fused`, by nn::adamw_update on torch's own state: one pass per
  // parameter where torch makes nine, the same values bit for bit (torch's step otherwise).
  void step() override;
  // Returns whether the last step() took the one-pass kernel.
  bool last_step_fused() const { return last_step_fused_; }
  // Returns the fp32 state values the torch optimizer holds once every parameter has
  // stepped: 2 per parameter value for Adam and AdamW (3 with amsgrad), 1 for SGD with
  // momentum (per param group's options).
  std::size_t state_values() const override;
  // Returns "torch.adam", "torch.adamw" or "torch.sgd".
  std::string kind() const override { return kind_; }
  StateDict state_dict() const override;
  // All-or-nothing: every key and shape is checked (std::invalid_argument naming the key)
  // before the torch optimizer changes.
  void load_state_dict(const StateDict& state) override;

 private:
  torch::optim::Optimizer& optimizer_;
  std::unordered_map<const void*, std::string> names_;
  std::string kind_;
  bool fused_;
  bool last_step_fused_ = false;
};

}  // namespace mpitrain::libtorch
