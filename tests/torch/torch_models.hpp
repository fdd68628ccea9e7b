#pragma once
// The models of the libtorch tests (issue 19), in libtorch: each one is, layer for layer and
// name for name, the Python model of tests/torch/torch_models.py (read that file for the
// architectures), so that initial weights written by reference_training.py load here by
// state_dict name and the two trainings can be compared.
//   Cnn(false)  Fashion-MNIST CNN without BatchNorm   (conv1, conv2, fc1, fc2)
//   Cnn(true)   the same with BatchNorm2d after each convolution   (+ bn1, bn2), and the
//               convolutions without bias (torch_models.py says why)
//   Tied        embedding(10, 32) -> mean -> linear 32->32 -> tanh -> output layer whose
//               weight is the embedding's weight (registered under both names, one tensor)
// Inputs are (batch, 784) fp32 pixel / 255 (mpitrain's IdxDataset rows); outputs (batch, 10)
// logits. Plus load_floating_state / save_floating_state: a module's floating state_dict
// tensors from and to a safetensors file (checkpoint/safetensors.hpp), by torch name.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "mpitrain/checkpoint/safetensors.hpp"
#include "mpitrain/tensor/named_tensor.hpp"

namespace mpitrain::torch_test {

inline constexpr std::int64_t kImageSide = 28;
inline constexpr std::int64_t kClasses = 10;
inline constexpr std::int64_t kTokenLevels = 10;  // the tied model's vocabulary
inline constexpr std::int64_t kEmbeddingDim = 32;

struct CnnImpl : torch::nn::Module {
  explicit CnnImpl(bool batch_norm) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1).bias(!batch_norm)));
    if (batch_norm) bn1 = register_module("bn1", torch::nn::BatchNorm2d(8));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1).bias(!batch_norm)));
    if (batch_norm) bn2 = register_module("bn2", torch::nn::BatchNorm2d(16));
    fc1 = register_module("fc1", torch::nn::Linear(16 * 7 * 7, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, kClasses));
  }
  // Returns the (batch, 10) logits of x (batch, 784).
  torch::Tensor forward(torch::Tensor x) {
    x = conv1(x.view({-1, 1, kImageSide, kImageSide}));
    if (bn1) x = bn1(x);
    x = torch::max_pool2d(torch::relu(x), 2);
    x = conv2(x);
    if (bn2) x = bn2(x);
    x = torch::max_pool2d(torch::relu(x), 2);
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Cnn);

// An output layer whose weight is a tensor owned elsewhere (tying), plus its own bias.
struct TiedOutputImpl : torch::nn::Module {
  explicit TiedOutputImpl(const torch::Tensor& tied_weight) {
    weight = register_parameter("weight", tied_weight);  // the same tensor, not a copy
    bias = register_parameter("bias", torch::zeros({tied_weight.size(0)}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight, bias); }
  torch::Tensor weight, bias;
};
TORCH_MODULE(TiedOutput);

// Returns the (batch, 49) int64 tokens of images x (batch, 784): 4x4 average pools,
// quantised to kTokenLevels levels.
inline torch::Tensor image_tokens(const torch::Tensor& x) {
  const torch::Tensor pooled = torch::avg_pool2d(x.view({-1, 1, kImageSide, kImageSide}), 4).flatten(1);
  return (pooled * kTokenLevels).floor().clamp(0, kTokenLevels - 1).to(torch::kLong);
}

struct TiedImpl : torch::nn::Module {
  TiedImpl() {
    embedding = register_module("embedding", torch::nn::Embedding(kTokenLevels, kEmbeddingDim));
    hidden = register_module("hidden", torch::nn::Linear(kEmbeddingDim, kEmbeddingDim));
    output = register_module("output", TiedOutput(embedding->weight));
  }
  // Returns the (batch, 10) logits of x (batch, 784).
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = embedding(image_tokens(x)).mean(1);
    return output(torch::tanh(hidden(h)));
  }
  torch::nn::Embedding embedding{nullptr};
  torch::nn::Linear hidden{nullptr};
  TiedOutput output{nullptr};
};
TORCH_MODULE(Tied);

// Copies every tensor of a safetensors file into the module's parameter or buffer of the same
// torch name (state_dict naming). Throws std::runtime_error for a name the module lacks, a
// shape that differs, or a floating parameter or buffer of the module the file lacks.
inline void load_floating_state(torch::nn::Module& module, const std::filesystem::path& file) {
  const checkpoint::SafetensorsContents contents = checkpoint::read_safetensors(file);
  torch::NoGradGuard no_grad;
  std::size_t found = 0;
  auto assign = [&](const std::string& name, torch::Tensor& target) {
    const auto it = contents.tensors.find(name);
    if (it == contents.tensors.end()) {
      if (!target.is_floating_point()) return;
      throw std::runtime_error(file.string() + ": no tensor '" + name + "'");
    }
    const Tensor& source = it->second;
    const std::vector<std::int64_t> shape(source.shape().begin(), source.shape().end());
    if (target.sizes() != torch::IntArrayRef(shape)) {
      throw std::runtime_error(file.string() + ": '" + name + "' has another shape than the module's");
    }
    target.copy_(torch::from_blob(const_cast<float*>(source.data()), shape, torch::kFloat32));
    ++found;
  };
  for (auto& item : module.named_parameters()) assign(item.key(), item.value());
  for (auto& item : module.named_buffers()) assign(item.key(), item.value());
  if (found == 0) throw std::runtime_error(file.string() + ": no tensor matches the module");
}

// Writes the module's floating parameters and buffers, by torch name, to a safetensors file.
inline void save_floating_state(const torch::nn::Module& module, const std::filesystem::path& file) {
  std::vector<std::string> names;
  std::vector<torch::Tensor> values;  // fp32, contiguous: the storage the views below read
  auto add = [&](const std::string& name, const torch::Tensor& value) {
    if (!value.is_floating_point()) return;
    names.push_back(name);
    values.push_back(value.detach().to(torch::kFloat32).contiguous());
  };
  for (const auto& item : module.named_parameters()) add(item.key(), item.value());
  for (const auto& item : module.named_buffers()) add(item.key(), item.value());
  std::vector<Tensor> views;
  views.reserve(values.size());  // NamedTensor points at these: no reallocation
  std::vector<NamedTensor> tensors;
  for (std::size_t i = 0; i < values.size(); ++i) {
    views.push_back(Tensor::view({values[i].data_ptr<float>(), static_cast<std::size_t>(values[i].numel())},
                                 Shape(values[i].sizes().begin(), values[i].sizes().end())));
    tensors.push_back(NamedTensor{names[i], &views.back()});
  }
  checkpoint::write_safetensors(file, tensors);
}

}  // namespace mpitrain::torch_test
