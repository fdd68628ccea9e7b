#include "mpitrain/nn/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace mpitrain::nn {
namespace {

std::string prefix(std::string_view who) { return std::string(who) + ": "; }

}  // namespace

Optimizer::Optimizer(std::vector<Parameter*> params, double lr) : params_(std::move(params)) {
  check_lr(lr, "Optimizer");
  lr_ = lr;
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i] == nullptr) {
      throw std::invalid_argument("Optimizer: parameter " + std::to_string(i) + " is null");
    }
    if (!names.insert(params_[i]->name).second) {
      throw std::invalid_argument("Optimizer: two parameters are named '" + params_[i]->name +
                                  "' (state dict keys need unique names)");
    }
  }
}

void Optimizer::zero_grad() noexcept {
  for (Parameter* p : params_) p->grad.zero();
}

void Optimizer::set_lr(double lr) {
  check_lr(lr, "Optimizer::set_lr");
  lr_ = lr;
}

bool Optimizer::has_grad(const Parameter& p, std::string_view who) {
  if (p.grad.empty() && !p.value.empty()) return false;
  if (p.grad.shape() != p.value.shape()) {
    throw std::invalid_argument(prefix(who) + "parameter '" + p.name + "' has shape " +
                                to_string(p.value.shape()) + " but its gradient has shape " +
                                to_string(p.grad.shape()));
  }
  return true;
}

Tensor Optimizer::clone(const Tensor& t) {
  Tensor copy(t.shape());
  std::copy_n(t.data(), t.numel(), copy.data());
  return copy;
}

double Optimizer::scalar_at(const StateDict& state, const std::string& key,
                            std::string_view who) {
  const auto it = state.scalars.find(key);
  if (it == state.scalars.end()) {
    throw std::invalid_argument(prefix(who) + "missing scalar key '" + key + "'");
  }
  return it->second;
}

std::int64_t Optimizer::count_at(const StateDict& state, const std::string& key,
                                 std::string_view who) {
  const double v = scalar_at(state, key, who);
  // 2^53: the largest range in which a double holds every integer exactly.
  if (!(v >= 0.0 && v <= 9007199254740992.0) || std::trunc(v) != v) {
    throw std::invalid_argument(prefix(who) + "scalar '" + key + "' = " + std::to_string(v) +
                                " is not a count (an integer >= 0)");
  }
  return static_cast<std::int64_t>(v);
}

bool Optimizer::flag_at(const StateDict& state, const std::string& key, std::string_view who) {
  const double v = scalar_at(state, key, who);
  if (v != 0.0 && v != 1.0) {
    throw std::invalid_argument(prefix(who) + "scalar '" + key + "' = " + std::to_string(v) +
                                " is not a flag (0 or 1)");
  }
  return v == 1.0;
}

void Optimizer::check_keys(const StateDict& state, const std::map<std::string, Shape>& tensors,
                           const std::set<std::string>& scalars, std::string_view who) {
  for (const auto& [key, shape] : tensors) {
    const auto it = state.tensors.find(key);
    if (it == state.tensors.end()) {
      throw std::invalid_argument(prefix(who) + "missing tensor key '" + key +
                                  "' (expected shape " + to_string(shape) + ")");
    }
    if (it->second.shape() != shape) {
      throw std::invalid_argument(prefix(who) + "tensor '" + key + "' has shape " +
                                  to_string(it->second.shape()) + " but expected shape " +
                                  to_string(shape));
    }
  }
  for (const auto& [key, tensor] : state.tensors) {
    if (!tensors.contains(key)) {
      throw std::invalid_argument(prefix(who) + "unexpected tensor key '" + key + "' (shape " +
                                  to_string(tensor.shape()) + ")");
    }
  }
  for (const std::string& key : scalars) {
    if (!state.scalars.contains(key)) {
      throw std::invalid_argument(prefix(who) + "missing scalar key '" + key + "'");
    }
  }
  for (const auto& [key, value] : state.scalars) {
    if (!scalars.contains(key)) {
      throw std::invalid_argument(prefix(who) + "unexpected scalar key '" + key + "'");
    }
  }
}

std::size_t Optimizer::state_values() const {
  std::size_t values = 0;
  for (const Parameter* p : params_) values += p->value.numel();
  return slots_per_value() * values;
}

void Optimizer::check_lr(double lr, std::string_view who) {
  if (!(lr >= 0.0) || !std::isfinite(lr)) {
    throw std::invalid_argument(prefix(who) + "invalid learning rate " + std::to_string(lr) +
                                " (must be finite and >= 0)");
  }
}

}  // namespace mpitrain::nn
