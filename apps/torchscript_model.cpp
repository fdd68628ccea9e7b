// model.kind torchscript (torchscript_model.hpp): loading and checking the module, its torch
// optimizer, and one training micro-batch through mpitrain::libtorch::TorchModel.
//
// Cost per micro-batch: one copy of the batch's features and labels into torch tensors, the
// module's forward and backward, one read of the loss; start-up: one forward of 2 examples.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <numeric>
#include <sstream>
#include <unordered_set>
#include <utility>
#include <vector>

#include "mpitrain/torch/torch_model.hpp"
#include "torchscript_model.hpp"

namespace mpitrain::app {
namespace {

// Returns the last non-empty line of a torch error (the TorchScript interpreter puts its
// traceback first and the error last), without the C++ backtrace.
std::string torch_error_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::istringstream text(c10_error != nullptr ? c10_error->what_without_backtrace() : e.what());
  std::string line, last;
  while (std::getline(text, line)) {
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  }
  return last.substr(std::min(last.size(), last.find_first_not_of(" \t")));
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("({})", fmt::join(shape, ", ")); }

// Returns the module of model.path, or throws ConfigError naming the key.
torch::jit::Module load_module(const TrainConfig& config) {
  const std::string& path = config.model.torchscript.path;
  const std::string where = config.origin("model.path") + ": model.path: ";
  if (!std::filesystem::is_regular_file(path)) {
    throw ConfigError(where + fmt::format("no such file '{}' (a module saved by torch.jit.save)", path));
  }
  try {
    return torch::jit::load(path, torch::kCPU);
  } catch (const std::exception& e) {
    throw ConfigError(where + fmt::format("'{}' is not a TorchScript module (torch.jit.load: {})", path,
                                          torch_error_line(e)));
  }
}

// Returns one example's input shape: model.input_shape, or (features) when it is null.
// Throws ConfigError when it does not hold `features` values.
std::vector<std::int64_t> input_shape(const TrainConfig& config, std::size_t features) {
  std::vector<std::int64_t> shape = config.model.torchscript.input_shape;
  if (shape.empty()) return {static_cast<std::int64_t>(features)};
  const std::int64_t values = std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
  if (values != static_cast<std::int64_t>(features)) {
    throw ConfigError(fmt::format("{}: model.input_shape: [{}] holds {} values per example, but the data's "
                                  "examples have {} features",
                                  config.origin("model.input_shape"), fmt::join(shape, ", "), values, features));
  }
  return shape;
}

// Runs `module` on a dummy batch of 2 examples (evaluation mode, no gradient) and throws
// ConfigError when the forward fails or its output is not (2, classes) logits.
void check_on_dummy_batch(const TrainConfig& config, torch::jit::Module& module,
                          const std::vector<std::int64_t>& shape, std::size_t classes) {
  std::vector<std::int64_t> dims{2};
  dims.insert(dims.end(), shape.begin(), shape.end());
  const std::vector<std::int64_t> wanted{2, static_cast<std::int64_t>(classes)};
  torch::NoGradGuard no_grad;
  module.eval();
  torch::jit::IValue out;
  try {
    out = module.forward({torch::zeros(dims)});
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("{}: model.input_shape: the model's forward fails on a dummy batch of shape {} "
                                  "(2 examples of model.input_shape): {}",
                                  config.origin("model.input_shape"), shape_text(dims), torch_error_line(e)));
  }
  module.train(true);
  const std::vector<std::int64_t> got = out.isTensor() ? out.toTensor().sizes().vec() : std::vector<std::int64_t>{};
  if (!out.isTensor() || got != wanted) {
    throw ConfigError(fmt::format(
        "{}: model.path: the model's output for a dummy batch of shape {} is {}, but model.task "
        "classification with the data's {} classes needs (batch, classes) logits, {}",
        config.origin("model.path"), shape_text(dims),
        out.isTensor() ? "of shape " + shape_text(got) : "a " + out.tagKind() + ", not a tensor", classes,
        shape_text(wanted)));
  }
}

// Returns the parameters to train (requires_grad), each tensor once (tied weights).
std::vector<at::Tensor> unique_trained_parameters(const torch::jit::Module& module) {
  std::vector<at::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const at::Tensor& p : module.parameters(true)) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

std::unique_ptr<torch::optim::Optimizer> make_torch_optimizer(const TrainConfig& config,
                                                              const std::vector<at::Tensor>& params) {
  const auto& o = config.optimizer;
  if (o.kind == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov).weight_decay(o.weight_decay));
  }
  if (o.kind == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr).betas({o.betas.at(0), o.betas.at(1)}).eps(o.eps).weight_decay(
                    o.weight_decay));
  }
  throw ConfigError(config.origin("optimizer.kind") + ": optimizer.kind: unknown optimizer '" + o.kind +
                    "' (known: adamw, sgd)");
}

class TorchScriptModel final : public ExternalModel {
 public:
  TorchScriptModel(const TrainConfig& config, torch::jit::Module module, std::vector<std::int64_t> shape)
      : config_(config), module_(std::move(module)), shape_(std::move(shape)),
        parameters_(unique_trained_parameters(module_)) {}

  void prepare(Engine& engine, const nn::Optimizer& lr) override {
    lr_ = &lr;
    torch::set_num_threads(std::max(1, torch::get_num_threads() / std::max(1, engine.communicator().local_size())));
    model_.reset();
    optimizer_ = make_torch_optimizer(config_, parameters_);
    model_ = std::make_unique<libtorch::TorchModel>(engine, module_, *optimizer_);
  }

  float train_batch(const data::Batch& batch) override {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr_->lr());
    const torch::Tensor x = features(batch);
    const torch::Tensor y = labels(batch);
    torch::Tensor loss;
    {
      auto autocast = model_->autocast();
      const torch::Tensor logits = model_->forward(module_, std::vector<torch::jit::IValue>{x}).toTensor();
      loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat), y);
    }
    model_->backward(loss);
    return loss.item<float>();
  }

  void zero_grad() override { model_->zero_grad(); }

  void set_training(bool training) override {
    if (!training) model_->before_forward();
    module_.train(training);
  }

  Tensor output(const data::Batch& batch) override {
    torch::NoGradGuard no_grad;
    const torch::Tensor out =
        module_.forward(std::vector<torch::jit::IValue>{features(batch)}).toTensor().to(torch::kFloat).contiguous();
    Tensor result({static_cast<std::size_t>(out.size(0)), static_cast<std::size_t>(out.numel() / out.size(0))});
    std::copy_n(out.data_ptr<float>(), result.numel(), result.data());
    return result;
  }

  std::filesystem::path save_model(const std::filesystem::path& dir, checkpoint::ModelFormat format) override {
    return model_->save_model(dir, format);
  }

  std::size_t parameter_count() const override {
    std::size_t n = 0;
    for (const at::Tensor& p : parameters_) n += static_cast<std::size_t>(p.numel());
    return n;
  }

  void unprepare() override { model_.reset(); }

 private:
  // Returns the batch's features as a (rows, input shape...) fp32 tensor of its own.
  torch::Tensor features(const data::Batch& batch) const {
    std::vector<std::int64_t> dims{static_cast<std::int64_t>(batch.features.dim(0))};
    dims.insert(dims.end(), shape_.begin(), shape_.end());
    return torch::from_blob(const_cast<float*>(batch.features.data()), dims, torch::kFloat).clone();
  }
  // Returns the batch's labels as int64 class indices.
  static torch::Tensor labels(const data::Batch& batch) {
    return torch::from_blob(const_cast<std::int32_t*>(batch.labels.data()),
                            {static_cast<std::int64_t>(batch.labels.size())}, torch::kInt)
        .to(torch::kLong);
  }

  const TrainConfig& config_;
  torch::jit::Module module_;
  std::vector<std::int64_t> shape_;
  std::vector<at::Tensor> parameters_;
  const nn::Optimizer* lr_ = nullptr;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<libtorch::TorchModel> model_;  // after the optimizer: destroyed first
};

}  // namespace

std::unique_ptr<ExternalModel> make_torchscript_model(const TrainConfig& config, std::size_t features,
                                                      std::size_t classes) {
  torch::manual_seed(static_cast<std::uint64_t>(config.seed));
  torch::jit::Module module = load_module(config);
  const std::vector<std::int64_t> shape = input_shape(config, features);
  check_on_dummy_batch(config, module, shape, classes);
  return std::make_unique<TorchScriptModel>(config, std::move(module), shape);
}

}  // namespace mpitrain::app
