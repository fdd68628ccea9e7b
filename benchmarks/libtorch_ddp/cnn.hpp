#pragma once
// The libtorch CNN of the benchmark (the Fashion-MNIST CNN of tests/torch/torch_models.hpp
// without BatchNorm; ddp_gloo.py defines the same layers in Python), and the conversion of an
// mpitrain batch to torch tensors. Input (batch, 784) pixel / 255; output (batch, 10) logits.
//   conv 1->8 (3x3, pad 1), ReLU, max-pool 2; conv 8->16 (3x3, pad 1), ReLU, max-pool 2;
//   linear 784->64, ReLU; linear 64->10.      63,562 parameters in 8 tensors (248 KiB fp32)

#include <cstdint>
#include <utility>

#include <torch/torch.h>

#include "mpitrain/data/data_loader.hpp"

namespace bench {

struct CnnImpl : torch::nn::Module {
  CnnImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(16 * 7 * 7, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 10));
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
