#pragma once
// Module: a layer or a composition of layers, with explicit forward and backward.
//
// forward(x) keeps what backward needs; backward(grad_out) accumulates (+=) into the
// parameters' gradients and returns the gradient with respect to the input. As soon as a
// parameter's gradient is final for this backward, the module calls the grad-ready hook with
// it, in the order backward produces them (reverse of registration for a Sequential); the
// engine launches bucket reductions from that hook while backward goes on.

#include <functional>
#include <string>
#include <vector>

#include "mpitrain/nn/parameter.hpp"
#include "mpitrain/nn/tensor.hpp"
#include "mpitrain/precision/precision_mode.hpp"

namespace mpitrain::nn {

using GradReadyHook = std::function<void(Parameter&)>;

class Module {
 public:
  virtual ~Module() = default;

  // Returns the output; x: (batch, features...) as each layer documents.
  virtual Tensor forward(const Tensor& x) = 0;
  // Returns d(loss)/d(input) given d(loss)/d(output) of the last forward.
  virtual Tensor backward(const Tensor& grad_out) = 0;

  // Returns the parameters in registration order, with their full state_dict() names.
  virtual std::vector<Parameter*> parameters() { return {}; }

  // Called with each parameter when its gradient is final; empty hook = no call.
  virtual void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }
  // Training mode (dropout active) or evaluation mode.
  virtual void train(bool on) { training_ = on; }
  bool is_training() const noexcept { return training_; }
  // Format of the values this module stores in forward/backward (DESIGN.md section 3).
  virtual void set_precision(Precision p) { precision_ = p; }
  Precision precision() const noexcept { return precision_; }

 protected:
  void notify_grad_ready(Parameter& p) const {
    if (grad_ready_) grad_ready_(p);
  }
  GradReadyHook grad_ready_;
  bool training_ = true;
  Precision precision_ = Precision::fp32;
};

}  // namespace mpitrain::nn
