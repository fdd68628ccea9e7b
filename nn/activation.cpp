#include "mpitrain/nn/activation.hpp"

#include <stdexcept>
#include <string>

#include "mpitrain/nn/gelu.hpp"
#include "mpitrain/nn/relu.hpp"
#include "mpitrain/nn/tanh.hpp"

namespace mpitrain::nn {

std::string_view to_string(Activation a) noexcept {
  switch (a) {
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
    case Activation::tanh: return "tanh";
  }
  return "relu";
}

Activation parse_activation(std::string_view name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  if (name == "tanh") return Activation::tanh;
  throw std::invalid_argument("unknown activation '" + std::string(name) +
                              "' (expected relu, gelu or tanh)");
}

std::unique_ptr<Module> make_activation(Activation a) {
  switch (a) {
    case Activation::relu: return std::make_unique<ReLU>();
    case Activation::gelu: return std::make_unique<GELU>();
    case Activation::tanh: return std::make_unique<Tanh>();
  }
  return std::make_unique<ReLU>();
}

}  // namespace mpitrain::nn
