#pragma once
// The libtorch CNN of the benchmark (the Fashion-MNIST CNN of tests/torch/torch_models.hpp
// without BatchNorm; ddp_gloo.py defines the same layers in Python), and the conversion of an
// mpitrain batch to torch tensors. Input (batch, 784) pixel / 255; output (batch, 10) logits.
//   conv 1->c1 (3x3, pad 1), ReLU, max-pool 2; conv c1->c2 (3x3, pad 1), ReLU, max-pool 2;
//   linear (c2*7*7)->hidden, ReLU; linear hidden->10.
// Two sizes (--model): "cnn" (c1 8, c2 16, hidden 64: 52,138 parameters in 8 tensors,
// 204 KiB fp32), the benchmark's model; "wide" (16, 32, 512: 813,258 parameters, 3.1 MiB),
// whose gradient exchange and optimizer step weigh more against its compute.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "mpitrain/data/data_loader.hpp"

namespace bench {

struct CnnShape {
  std::int64_t c1, c2, hidden;
};

// Returns the shape of the model named `model` ("cnn" or "wide").
inline CnnShape cnn_shape(const std::string& model) {
  if (model == "cnn") return {8, 16, 64};
  if (model == "wide") return {16, 32, 512};
  throw std::invalid_argument("unknown model '" + model + "' (cnn, wide)");
}

struct CnnImpl : torch::nn::Module {
  explicit CnnImpl(CnnShape s = cnn_shape("cnn")) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, s.c1, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(s.c1, s.c2, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(s.c2 * 7 * 7, s.hidden));
    fc2 = register_module("fc2", torch::nn::Linear(s.hidden, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x.view({-1, 1, 28, 28}))), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Cnn);

// Returns (features (batch, 784) fp32, labels (batch) int64) of `batch`; the features view
// the batch's storage, which must outlive them.
inline std::pair<torch::Tensor, torch::Tensor> to_torch(mpitrain::data::Batch& batch) {
  const auto rows = static_cast<std::int64_t>(batch.labels.size());
  torch::Tensor x = torch::from_blob(batch.features.data(), {rows, 784}, torch::kFloat32);
  torch::Tensor y = torch::from_blob(batch.labels.data(), {rows}, torch::kInt32).to(torch::kLong);
  return {x, y};
}

}  // namespace bench
