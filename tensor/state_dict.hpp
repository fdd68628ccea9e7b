#pragma once
// StateDict: the named tensors and scalars that make an object's state, so that it can be
// checkpointed and restored exactly. Tensor keys look like "<param name>/<slot>"
// ("0.weight/exp_avg"); scalar keys name hyper-parameters and counters ("lr", "step").

#include <map>
#include <string>

#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain {

struct StateDict {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;  // integers up to 2^53 are exact
};

}  // namespace mpitrain
