#pragma once
// AdamW: Adam with decoupled weight decay, torch.optim.AdamW (PyTorch 1.13, single-tensor
// implementation) semantics, bit for bit: for each parameter p with gradient g, at its
// step t = 1, 2, ... (float32 tensors, double scalars rounded to float32 where torch does)
//   g = maximize ? -g : g
//   p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   vmax = max(vmax, v)                           (amsgrad; then vmax replaces v below)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p - (lr / (1 - beta1^t)) * m / denom
// State dict: scalars lr, betas.0, betas.1, eps, weight_decay, amsgrad, maximize and
// "<name>/step"; tensors "<name>/exp_avg", "<name>/exp_avg_sq" (and "<name>/max_exp_avg_sq"
// with amsgrad) only for parameters with step > 0 (torch creates them at the first step).

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/nn/optimizer.hpp"

namespace mpitrain::nn {

// torch.optim.AdamW's arguments and defaults.
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

class AdamW final : public Optimizer {
 public:
  // Throws std::invalid_argument for what torch rejects: lr < 0, eps < 0, a beta outside
  // [0, 1), weight_decay < 0.
  AdamW(std::vector<Parameter*> params, const AdamWOptions& options = {});

  void step() override;
  std::string kind() const override { return "adamw"; }
  std::size_t slots_per_value() const override { return options_.amsgrad ? 3 : 2; }
  std::unique_ptr<Optimizer> fresh_copy(std::vector<Parameter*> params) const override {
    return std::make_unique<AdamW>(std::move(params), options());
  }
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  // Returns the hyper-parameters, with the current learning rate.
  AdamWOptions options() const;

 private:
  struct ParamState {
    std::int64_t step = 0;  // steps that updated this parameter
    Tensor exp_avg;         // m; empty until the first step
    Tensor exp_avg_sq;      // v; empty until the first step
    Tensor max_exp_avg_sq;  // vmax; only with amsgrad
  };

  AdamWOptions options_;
  std::vector<ParamState> state_;  // one per parameter, in parameters() order
};

// Applies one AdamW update (the formulas at the top of this file) in place to one float32
// parameter at its step `step` (1 for its first update), with options.lr as the learning
// rate: bit for bit what torch 1.13's AdamW computes for it, in one pass instead of torch's
// nine. `grad`, `exp_avg`, `exp_avg_sq` have param.size() elements, and so has
// `max_exp_avg_sq` with options.amsgrad (it is not read otherwise). Used by AdamW::step and
// by mpitrain::torch to step a torch::optim::AdamW's own state. Throws std::invalid_argument
// for a size mismatch or step < 1.
void adamw_update(std::span<float> param, std::span<const float> grad,
                  std::span<float> exp_avg, std::span<float> exp_avg_sq,
                  std::span<float> max_exp_avg_sq, const AdamWOptions& options,
                  std::int64_t step);

}  // namespace mpitrain::nn
