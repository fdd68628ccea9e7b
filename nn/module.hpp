#pragma once
// Module: a layer or a composition of layers, with explicit forward and backward.
//
// forward(x) keeps what backward needs; backward(grad_out) accumulates (+=) into the
// parameters' gradients and returns the gradient with respect to the input. As soon as a
// parameter's gradient is final for this backward, the module calls the grad-ready hook with
// it, in the order backward produces them (reverse of registration for a Sequential); the
// engine launches bucket reductions from that hook while backward goes on.
//
// Ready order: every layer of this library notifies its parameters in the reverse of the
// order parameters() lists them (Linear and LayerNorm: bias, then weight), and Sequential
// runs its children backwards, so for a whole model the hook sees exactly the reverse of
// parameters() ("4.bias", "4.weight", "2.bias", ...), as DDP assumes when it fills buckets.
//
// Buffers: layers keep what backward needs in storage they reuse from step to step, and
// forward_into/backward_into write results into caller-owned buffers, so a Sequential of
// the same shapes allocates only the tensors it returns to its caller.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/nn/parameter.hpp"
#include "mpitrain/nn/rng.hpp"
#include "mpitrain/tensor/tensor.hpp"
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
  // Same as forward, writing into `out`, whose storage is reused when its size already
  // fits (Tensor::resize): a container keeps one buffer per child, so a steady training
  // loop allocates nothing for activations. `out` must not alias `x`. The default calls
  // forward(); the layers of this library implement it and their forward() calls it.
  virtual void forward_into(const Tensor& x, Tensor& out) { out = forward(x); }
  // Same as backward, writing into `grad_in` (made empty when no input gradient is
  // required). `grad_in` must not alias `grad_out`.
  virtual void backward_into(const Tensor& grad_out, Tensor& grad_in) {
    grad_in = backward(grad_out);
  }

  // Returns the parameters in registration order, with their full state_dict() names.
  virtual std::vector<Parameter*> parameters() { return {}; }
  // Returns the random streams of this module and its children, each named by its module
  // path ("" for this module itself, "3" for child 3 of a Sequential, "1.3" nested), so that
  // a checkpoint can store them and a resumed run draws the same dropout masks.
  virtual std::vector<std::pair<std::string, Rng*>> random_streams() { return {}; }

  // Called with each parameter when its gradient is final; empty hook = no call.
  virtual void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }
  // Training mode (dropout active) or evaluation mode.
  virtual void train(bool on) { training_ = on; }
  bool is_training() const noexcept { return training_; }
  // Format of the values this module stores in forward/backward (DESIGN.md section 3).
  virtual void set_precision(Precision p) { precision_ = p; }
  Precision precision() const noexcept { return precision_; }
  // Whether backward computes d(loss)/d(input). Off, backward still accumulates parameter
  // gradients but returns an empty tensor: the first layer of a network needs no input
  // gradient, and torch skips that product the same way (its input has requires_grad=False).
  virtual void set_requires_input_grad(bool on) { requires_input_grad_ = on; }
  bool requires_input_grad() const noexcept { return requires_input_grad_; }

 protected:
  void notify_grad_ready(Parameter& p) const {
    if (grad_ready_) grad_ready_(p);
  }
  GradReadyHook grad_ready_;
  bool training_ = true;
  bool requires_input_grad_ = true;
  Precision precision_ = Precision::fp32;
};

}  // namespace mpitrain::nn
