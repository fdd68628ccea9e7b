#pragma once
// Sequential: children run in order, torch.nn.Sequential.
//
// Parameter names are torch's state_dict() names: a child's parameter "weight" at index i
// becomes "<i>.weight", and a Sequential nested at index 1 gives "1.0.weight". Names are
// prefixed when the child is added, so build a child completely before adding it.
// backward runs the children in reverse; with every child notifying in the reverse of its
// parameters() order, the grad-ready hook sees the reverse of this module's parameters().
// train(), set_precision() and the grad-ready hook are passed to every child (also to
// children added later); set_requires_input_grad() to the first child only, since every
// later child's input gradient is needed by the child before it.
// Intermediate activations and gradients live in buffers this module keeps and reuses, so
// only the returned output (and input gradient) is allocated per step.

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "mpitrain/nn/module.hpp"

namespace mpitrain::nn {

class Sequential : public Module {
 public:
  // Appends `child` at index size() and returns it; throws std::invalid_argument if null.
  Module& add(std::unique_ptr<Module> child);
  // Constructs an M from `args`, appends it and returns it.
  template <class M, class... Args>
  M& emplace(Args&&... args) {
    auto child = std::make_unique<M>(std::forward<Args>(args)...);
    M& ref = *child;
    add(std::move(child));
    return ref;
  }

  std::size_t size() const noexcept { return children_.size(); }
  // Returns child `i`; throws std::out_of_range.
  Module& operator[](std::size_t i) const;

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  void backward_into(const Tensor& grad_out, Tensor& grad_in) override;
  std::vector<Parameter*> parameters() override;
  std::vector<std::pair<std::string, Rng*>> random_streams() override;
  void set_grad_ready_hook(GradReadyHook hook) override;
  void train(bool on) override;
  void set_precision(Precision p) override;
  void set_requires_input_grad(bool on) override;

 private:
  std::vector<std::unique_ptr<Module>> children_;
  // outputs_[i]: child i's output for i < size() - 1; grads_[i]: d(loss)/d(output of child
  // i - 1) for i >= 1. Kept between steps so their storage is reused.
  std::vector<Tensor> outputs_;
  std::vector<Tensor> grads_;
};

}  // namespace mpitrain::nn
