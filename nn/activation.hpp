#pragma once
// Activation: the elementwise nonlinearities a model config can name.

#include <memory>
#include <string_view>

#include "mpitrain/nn/module.hpp"

namespace mpitrain::nn {

enum class Activation { relu, gelu, tanh };

// Returns "relu", "gelu" or "tanh".
std::string_view to_string(Activation a) noexcept;
// Returns the activation named `name`; throws std::invalid_argument listing the choices.
Activation parse_activation(std::string_view name);
// Returns a new ReLU, GELU or Tanh module.
std::unique_ptr<Module> make_activation(Activation a);

}  // namespace mpitrain::nn
