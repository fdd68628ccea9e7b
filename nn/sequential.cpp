#include "mpitrain/nn/sequential.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mpitrain::nn {

Module& Sequential::add(std::unique_ptr<Module> child) {
  if (!child) throw std::invalid_argument("Sequential::add: null child");
  const std::string prefix = std::to_string(children_.size()) + ".";
  for (Parameter* p : child->parameters()) p->name = prefix + p->name;
  child->set_grad_ready_hook(grad_ready_);
  child->train(training_);
  child->set_precision(precision_);
  if (children_.empty()) child->set_requires_input_grad(requires_input_grad_);
  children_.push_back(std::move(child));
  return *children_.back();
}

Module& Sequential::operator[](std::size_t i) const {
  if (i >= children_.size()) {
    throw std::out_of_range("Sequential: child " + std::to_string(i) + " of " +
                            std::to_string(children_.size()));
  }
  return *children_[i];
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y;
  forward_into(x, y);
  return y;
}

Tensor Sequential::backward(const Tensor& grad_out) {
  Tensor dx;
  backward_into(grad_out, dx);
  return dx;
}

void Sequential::forward_into(const Tensor& x, Tensor& out) {
  const std::size_t n = children_.size();
  if (n == 0) {
    out.resize(x.shape());
    std::copy_n(x.data(), x.numel(), out.data());
    return;
  }
  outputs_.resize(n - 1);
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor& in = i == 0 ? x : outputs_[i - 1];
    children_[i]->forward_into(in, i + 1 == n ? out : outputs_[i]);
  }
}

void Sequential::backward_into(const Tensor& grad_out, Tensor& grad_in) {
  const std::size_t n = children_.size();
  if (n == 0) {
    if (!requires_input_grad_) {
      grad_in = Tensor();
      return;
    }
    grad_in.resize(grad_out.shape());
    std::copy_n(grad_out.data(), grad_out.numel(), grad_in.data());
    return;
  }
  grads_.resize(n);
  for (std::size_t i = n; i-- > 0;) {
    const Tensor& g = i + 1 == n ? grad_out : grads_[i + 1];
    children_[i]->backward_into(g, i == 0 ? grad_in : grads_[i]);
  }
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (auto& child : children_) {
    for (Parameter* p : child->parameters()) all.push_back(p);
  }
  return all;
}

std::vector<std::pair<std::string, Rng*>> Sequential::random_streams() {
  std::vector<std::pair<std::string, Rng*>> all;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    for (auto& [path, rng] : children_[i]->random_streams()) {
      all.emplace_back(path.empty() ? std::to_string(i) : std::to_string(i) + "." + path, rng);
    }
  }
  return all;
}

void Sequential::set_grad_ready_hook(GradReadyHook hook) {
  grad_ready_ = std::move(hook);
  for (auto& child : children_) child->set_grad_ready_hook(grad_ready_);
}

void Sequential::train(bool on) {
  training_ = on;
  for (auto& child : children_) child->train(on);
}

void Sequential::set_precision(Precision p) {
  precision_ = p;
  for (auto& child : children_) child->set_precision(p);
}

void Sequential::set_requires_input_grad(bool on) {
  requires_input_grad_ = on;
  if (!children_.empty()) children_.front()->set_requires_input_grad(on);
}

}  // namespace mpitrain::nn
