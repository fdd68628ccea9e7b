#pragma once
// Shared check of the parameter-free elementwise layers against torch's golden data.

#include <string>

#include "golden_file.hpp"
#include "mpitrain/nn/module.hpp"
#include "nn_test_util.hpp"

namespace mpitrain::nn::testing {

// Runs forward and backward of `layer` on golden group `group` of layers.h5 and compares
// y and grad_x with torch at relative tolerance `rtol`.
inline void expect_layer_matches_torch(Module& layer, const std::string& group, double rtol) {
  GoldenFile g(golden_path("layers.h5"));
  const Tensor y = layer.forward(g.tensor(group + "/x"));
  expect_close(y, g.tensor(group + "/y"), rtol, group + " y");
  const Tensor dx = layer.backward(g.tensor(group + "/grad_y"));
  expect_close(dx, g.tensor(group + "/grad_x"), rtol, group + " grad_x");
}

}  // namespace mpitrain::nn::testing
