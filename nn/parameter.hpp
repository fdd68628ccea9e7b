#pragma once
// Parameter: a named trainable tensor and its gradient.
//
// Names follow PyTorch state_dict() names ("0.weight"). The gradient may be rebound to
// storage owned by someone else (the engine places gradients inside its flat communication
// buckets), so code that uses a gradient reads `grad` at the time of use and never keeps a
// pointer across steps. A user who keeps parameters in their own buffers makes a Parameter
// from views (Tensor::view) of them.

#include <span>
#include <string>
#include <vector>

#include "mpitrain/tensor/named_tensor.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::nn {

struct Parameter {
  std::string name;
  Tensor value;  // fp32 master weights
  Tensor grad;   // same shape as value; accumulated (+=) by backward

  // Makes `grad` a view of `storage` (numel values), copying the current gradient into it.
  void rebind_grad(std::span<float> storage);
};

// Sets every parameter's gradient to zero (in place, so rebound gradients stay views).
void zero_grad(const std::vector<Parameter*>& params) noexcept;

// Returns each parameter's value under its name, in order, as views for writers of weights
// (checkpoint::save_model); the parameters must outlive the list. Throws
// std::invalid_argument for a null parameter.
std::vector<NamedTensor> named_tensors(std::span<Parameter* const> params);

}  // namespace mpitrain::nn
