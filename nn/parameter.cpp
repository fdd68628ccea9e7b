#include "mpitrain/nn/parameter.hpp"

#include <algorithm>
#include <stdexcept>

namespace mpitrain::nn {

void Parameter::rebind_grad(std::span<float> storage) {
  if (storage.size() != value.numel()) {
    throw std::invalid_argument("Parameter::rebind_grad: '" + name + "' has " +
                                std::to_string(value.numel()) + " values but the storage holds " +
                                std::to_string(storage.size()));
  }
  if (grad.numel() == storage.size() && grad.data() != storage.data()) {
    std::copy_n(grad.data(), storage.size(), storage.data());
  } else if (grad.numel() != storage.size()) {
    std::fill(storage.begin(), storage.end(), 0.0f);
  }
  grad = Tensor::view(storage, value.shape());
}

void zero_grad(const std::vector<Parameter*>& params) noexcept {
  for (Parameter* p : params) p->grad.zero();
}

std::vector<NamedTensor> named_tensors(std::span<Parameter* const> params) {
  std::vector<NamedTensor> out;
  out.reserve(params.size());
  for (const Parameter* p : params) {
    if (p == nullptr) throw std::invalid_argument("named_tensors: null parameter");
    out.push_back({p->name, &p->value});
  }
  return out;
}

}  // namespace mpitrain::nn
