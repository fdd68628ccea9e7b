#pragma once
// NamedTensor: a tensor under a name, the unit in which writers of weights take their input
// (save_model, the safetensors writer). It is a view: it neither owns nor copies the tensor,
// which must outlive it. Whoever holds tensors under names (nn::Parameter, a state dict, a
// user's own buffers) builds a list of these; the writers need nothing else of them.

#include <string>

#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain {

struct NamedTensor {
  std::string name;                // e.g. a PyTorch state_dict() name, "0.weight"
  const Tensor* tensor = nullptr;  // not owned; writers refuse a null one
};

}  // namespace mpitrain
