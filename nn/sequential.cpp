#include "mpitrain/nn/sequential.hpp"

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
  if (children_.empty()) return x;
  Tensor h = children_.front()->forward(x);
  for (std::size_t i = 1; i < children_.size(); ++i) h = children_[i]->forward(h);
  return h;
}

Tensor Sequential::backward(const Tensor& grad_out) {
  if (children_.empty()) return requires_input_grad_ ? grad_out : Tensor();
  Tensor g = children_.back()->backward(grad_out);
  for (std::size_t i = children_.size() - 1; i-- > 0;) g = children_[i]->backward(g);
  return g;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (auto& child : children_) {
    for (Parameter* p : child->parameters()) all.push_back(p);
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
