#pragma once
// Models, batches and comparisons shared by the libtorch component's tests.

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <typeinfo>
#include <string>
#include <vector>

#include "mpitrain/engine/engine.hpp"
#include "mpitrain/torch/torch_model.hpp"

namespace mpitrain::libtorch::testing {

// ---- models ---------------------------------------------------------------------------------

// A small CNN without BatchNorm on 1x8x8 inputs, 10 classes.
struct SmallCnn : torch::nn::Module {
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  SmallCnn() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(4 * 4 * 4, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::max_pool2d(torch::relu(conv->forward(x)), 2);
    return fc2->forward(torch::relu(fc1->forward(h.flatten(1))));
  }
};

// The same with BatchNorm after the convolution (running statistics: buffers).
struct BnCnn : torch::nn::Module {
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
  BnCnn() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * 4 * 4, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc->forward(torch::max_pool2d(torch::relu(bn->forward(conv->forward(x))), 2).flatten(1));
  }
};

// Holds one weight tensor under the name "weight".
struct Holder : torch::nn::Module {
  torch::Tensor weight;
  explicit Holder(torch::Tensor w) { weight = register_parameter("weight", std::move(w)); }
};

// A language-model-like net whose output layer is its embedding (tied weights): tokens ->
// embed.weight rows -> tanh(hidden) -> logits = h embed.weight^T. "head.weight" is the same
// tensor as "embed.weight".
struct TiedNet : torch::nn::Module {
  static constexpr std::int64_t kVocab = 16, kDim = 8;
  std::shared_ptr<Holder> embed, head;
  torch::nn::Linear hidden{nullptr};
  TiedNet() {
    embed = register_module("embed", std::make_shared<Holder>(torch::randn({kVocab, kDim}) * 0.5));
    hidden = register_module("hidden", torch::nn::Linear(kDim, kDim));
    head = register_module("head", std::make_shared<Holder>(embed->weight));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    torch::Tensor h = torch::tanh(hidden->forward(embed->weight.index_select(0, tokens)));
    return torch::matmul(h, head->weight.t());
  }
};

// A global batch of 64 examples for step `step`: images (64,1,8,8) and labels (64).
struct Batch {
  torch::Tensor x, y;
};
inline Batch image_batch(int step) {
  torch::manual_seed(1000 + step);
  return {torch::randn({64, 1, 8, 8}), torch::randint(0, 10, {64}, torch::kLong)};
}
inline Batch token_batch(int step) {
  torch::manual_seed(2000 + step);
  return {torch::randint(0, TiedNet::kVocab, {64}, torch::kLong),
          torch::randint(0, TiedNet::kVocab, {64}, torch::kLong)};
}

// Returns rows [rank*n, (rank+1)*n) of `t`, n = rows / world.
inline torch::Tensor shard(const torch::Tensor& t, int rank, int world) {
  const std::int64_t n = t.size(0) / world;
  return t.narrow(0, rank * n, n);
}

// Returns max |a - b| / max |b| over the parameters of two modules (same names).
inline double relative_error(torch::nn::Module& a, torch::nn::Module& b) {
  double diff = 0.0, scale = 0.0;
  const auto pb = b.named_parameters(true);
  for (const auto& item : a.named_parameters(true)) {
    const torch::Tensor& vb = pb[item.key()];
    diff = std::max(diff, (item.value() - vb).abs().max().item<double>());
    scale = std::max(scale, vb.abs().max().item<double>());
  }
  return diff / scale;
}

// Returns the bits of every parameter and buffer of `m`, in order.
inline std::vector<float> all_values(torch::nn::Module& m) {
  std::vector<float> out;
  for (const torch::Tensor& t : m.parameters(true)) {
    const torch::Tensor c = t.detach().contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  for (const torch::Tensor& t : m.buffers(true)) {
    const torch::Tensor c = t.detach().to(torch::kFloat).contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// An engine configuration with 1 KiB buckets: several buckets for these small models.
inline EngineConfig small_buckets() {
  EngineConfig c;
  c.bucket_cap_mb = 1.0 / 1024;
  c.first_bucket_mb = 1.0 / 1024;
  return c;
}

struct TrainOptions {
  EngineConfig config = small_buckets();
  std::int64_t accumulation = 1;  // micro-batches per step (gradient_accumulation_steps)
  double clip_norm = 0.0;         // > 0: clip_grad_norm to it (torch: clip_grad_norm_)
  double clip_value = 0.0;        // > 0: clip_grad_value (torch: clip_grad_value_)
  int steps = 20;
};

// Trains `Net` opts.steps steps with AdamW (lr 1e-2) through the engine, each rank on its
// shard of each global batch of 64 (in opts.accumulation micro-batches), and the same net
// (same initial weights) in plain torch on the whole batch. Returns max|a-b| / max|b| over
// all parameters.
template <class Net, class MakeBatch>
double engine_against_plain_torch(const Communicator& comm, MakeBatch make_batch,
                                  TrainOptions opts = {}) {
  torch::manual_seed(7);
  Net net;
  torch::manual_seed(7);
  Net reference;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  torch::optim::AdamW ref_opt(unique_parameters(reference), torch::optim::AdamWOptions(1e-2));
  opts.config.gradient_accumulation_steps = static_cast<std::size_t>(opts.accumulation);
  Engine engine(opts.config, comm);
  TorchModel model(engine, net, opt);
  for (int step = 0; step < opts.steps; ++step) {
    const Batch b = make_batch(step);
    const torch::Tensor x = shard(b.x, comm.rank(), comm.size());
    const torch::Tensor y = shard(b.y, comm.rank(), comm.size());
    const auto micro_batches = static_cast<int>(opts.accumulation);
    for (int m = 0; m < micro_batches; ++m) {
      auto micro = engine.accumulate();
      model.before_forward();
      const torch::Tensor logits = net.forward(shard(x, m, micro_batches));
      model.backward(torch::nn::functional::cross_entropy(logits, shard(y, m, micro_batches)));
      if (engine.sync_gradients() && opts.clip_norm > 0) engine.clip_grad_norm(opts.clip_norm);
      if (engine.sync_gradients() && opts.clip_value > 0) engine.clip_grad_value(opts.clip_value);
      engine.step();
      model.zero_grad();
    }
    ref_opt.zero_grad();
    torch::nn::functional::cross_entropy(reference.forward(b.x), b.y).backward();
    const std::vector<torch::Tensor> ref_params = unique_parameters(reference);
    if (opts.clip_norm > 0) torch::nn::utils::clip_grad_norm_(ref_params, opts.clip_norm);
    if (opts.clip_value > 0) torch::nn::utils::clip_grad_value_(ref_params, opts.clip_value);
    ref_opt.step();
  }
  const double error = relative_error(net, reference);
  std::printf("[rank %d of %d] %s: max|a-b|/max|b| = %.3g after %d steps\n", comm.rank(),
              comm.size(), typeid(Net).name(), error, opts.steps);
  return error;
}

}  // namespace mpitrain::libtorch::testing
