#pragma once
// Sgd: stochastic gradient descent with momentum, torch.optim.SGD (PyTorch 1.13) semantics,
// bit for bit: for each parameter p with gradient g (float32 throughout)
//   d = maximize ? -g : g
//   d = d + weight_decay * p                      (only if weight_decay != 0)
//   if momentum != 0:
//     buf = first step ? d : momentum * buf + (1 - dampening) * d
//     d   = nesterov ? d + momentum * buf : buf
//   p = p - lr * d
// State dict: scalars lr, momentum, dampening, weight_decay, nesterov, maximize and
// "<name>/step"; tensor "<name>/momentum_buffer" only when momentum != 0 and step > 0
// (torch creates the buffer at a parameter's first step, as a copy of d).

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/nn/optimizer.hpp"

namespace mpitrain::nn {

// torch.optim.SGD's arguments and defaults. torch has no default learning rate, so lr must
// be set (the NaN default makes the constructor throw if it is not).
struct SgdOptions {
  double lr = std::numeric_limits<double>::quiet_NaN();
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

class Sgd final : public Optimizer {
 public:
  // Throws std::invalid_argument for what torch rejects: lr unset or < 0, momentum < 0,
  // weight_decay < 0, nesterov without momentum > 0 and dampening == 0.
  Sgd(std::vector<Parameter*> params, const SgdOptions& options);

  void step() override;
  std::string kind() const override { return "sgd"; }
  std::size_t slots_per_value() const override { return options_.momentum != 0.0 ? 1 : 0; }
  std::unique_ptr<Optimizer> fresh_copy(std::vector<Parameter*> params) const override {
    return std::make_unique<Sgd>(std::move(params), options());
  }
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  // Returns the hyper-parameters, with the current learning rate.
  SgdOptions options() const;

 private:
  struct ParamState {
    std::int64_t step = 0;   // steps that updated this parameter
    Tensor momentum_buffer;  // empty until the first step (or always, if momentum == 0)
  };

  SgdOptions options_;
  std::vector<ParamState> state_;  // one per parameter, in parameters() order
};

}  // namespace mpitrain::nn
