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
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <utility>
#include <vector>

#include "mpitrain/checkpoint/load_model.hpp"
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

bool is_language_model(const TrainConfig& config) { return config.model.torchscript.task == "language_model"; }

// Runs `module` on a dummy batch of 2 examples (evaluation mode, no gradient) and throws
// ConfigError when the forward fails or its output is not (2, classes) logits (classification:
// inputs (2, input shape...) fp32) or (2, block_size, classes) logits (language_model: inputs
// (2, block_size) int64 tokens; `shape` is {block_size}).
void check_on_dummy_batch(const TrainConfig& config, torch::jit::Module& module,
                          const std::vector<std::int64_t>& shape, std::size_t classes) {
  const bool lm = is_language_model(config);
  std::vector<std::int64_t> dims{2};
  dims.insert(dims.end(), shape.begin(), shape.end());
  std::vector<std::int64_t> wanted = dims;
  if (!lm) wanted.resize(1);
  wanted.push_back(static_cast<std::int64_t>(classes));
  const std::string input_key = lm ? config.block_size_key() : "model.input_shape";
  torch::NoGradGuard no_grad;
  module.eval();
  torch::jit::IValue out;
  try {
    out = module.forward({lm ? torch::zeros(dims, torch::kLong) : torch::zeros(dims)});
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("{}: {}: the model's forward fails on a dummy batch of shape {} ({}): {}",
                                  config.origin(input_key), input_key, shape_text(dims),
                                  lm ? "2 windows of int64 tokens" : "2 examples of model.input_shape",
                                  torch_error_line(e)));
  }
  module.train(true);
  const std::vector<std::int64_t> got = out.isTensor() ? out.toTensor().sizes().vec() : std::vector<std::int64_t>{};
  if (!out.isTensor() || got != wanted) {
    throw ConfigError(fmt::format(
        "{}: model.path: the model's output for a dummy batch of shape {} is {}, but model.task {} with the "
        "data's {} classes needs {} logits, {}",
        config.origin("model.path"), shape_text(dims),
        out.isTensor() ? "of shape " + shape_text(got) : "a " + out.tagKind() + ", not a tensor",
        config.model.torchscript.task, classes, lm ? "(batch, block_size, classes)" : "(batch, classes)",
        shape_text(wanted) +
            (config.data.kind == "tokens" ? " (the classes are data.tokens.vocab_size: set it to the model's)" : "")));
  }
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

// Copies every parameter and buffer of `module` from `weights` (by torch name), or throws
// std::runtime_error naming the first that is missing or of another shape.
void fill_module(torch::jit::Module& module, const std::map<std::string, Tensor>& weights,
                 const std::filesystem::path& from) {
  torch::NoGradGuard no_grad;
  const auto fill = [&](const std::string& name, at::Tensor value) {
    const auto it = weights.find(name);
    if (value.scalar_type() != torch::kFloat) return;  // int64 counters are not weights
    const std::vector<std::int64_t> shape = value.sizes().vec();
    if (it == weights.end() || std::vector<std::int64_t>(it->second.shape().begin(), it->second.shape().end()) != shape) {
      throw std::runtime_error(fmt::format("{}: no tensor '{}' of shape {} for the model", from.string(), name,
                                           shape_text(shape)));
    }
    value.copy_(torch::from_blob(const_cast<float*>(it->second.data()), shape, torch::kFloat));
  };
  for (const auto& p : module.named_parameters(true)) fill(p.name, p.value);
  for (const auto& b : module.named_buffers(true)) fill(b.name, b.value);
}

class TorchScriptModel final : public ExternalModel {
 public:
  TorchScriptModel(const TrainConfig& config, torch::jit::Module module, std::vector<std::int64_t> shape)
      : config_(config), module_(std::move(module)), shape_(std::move(shape)),
        parameters_(libtorch::unique_trained_parameters(module_)),
        language_model_(is_language_model(config)) {}

  void prepare(Engine& engine, const nn::Optimizer& lr) override {
    lr_ = &lr;
    torch::set_num_threads(std::max(1, torch::get_num_threads() / std::max(1, engine.communicator().local_size())));
    model_.reset();
    optimizer_ = make_torch_optimizer(config_, parameters_);
    model_ = std::make_unique<libtorch::TorchModel>(engine, module_, *optimizer_);
  }

  float train_batch(const data::Batch& batch) override {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr_->lr());
    const Inputs in = inputs(batch);
    torch::Tensor loss;
    {
      auto autocast = model_->autocast();
      const torch::Tensor logits = model_->forward(module_, std::vector<torch::jit::IValue>{in.x}).toTensor();
      // (rows, classes) or (rows * block_size, classes) against (rows) or (rows * block_size).
      loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat).reshape({-1, logits.size(-1)}),
                                                  in.y.reshape(-1));
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
        module_.forward(std::vector<torch::jit::IValue>{inputs(batch).x}).toTensor().to(torch::kFloat).contiguous();
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

  void load_weights(const std::map<std::string, Tensor>& weights, const std::filesystem::path& from) override {
    fill_module(module_, weights, from);
  }

  void unprepare() override { model_.reset(); }

 private:
  struct Inputs {
    torch::Tensor x;  // the model's input
    torch::Tensor y;  // int64 targets: (rows) class indices, or (rows, block_size) next tokens
  };
  // Returns the batch as torch tensors of their own. Classification: x (rows, input
  // shape...) fp32, y the labels. Language model: the windows' tokens [0, block_size) as x
  // and [1, block_size] as y.
  Inputs inputs(const data::Batch& batch) const {
    const auto rows = static_cast<std::int64_t>(batch.features.dim(0));
    const torch::Tensor f = torch::from_blob(const_cast<float*>(batch.features.data()),
                                             {rows, static_cast<std::int64_t>(batch.features.numel()) / rows});
    if (language_model_) {
      const torch::Tensor tokens = f.to(torch::kLong);
      return {tokens.slice(1, 0, -1).contiguous(), tokens.slice(1, 1).contiguous()};
    }
    std::vector<std::int64_t> dims{rows};
    dims.insert(dims.end(), shape_.begin(), shape_.end());
    const torch::Tensor labels = torch::from_blob(const_cast<std::int32_t*>(batch.labels.data()), {rows}, torch::kInt);
    return {f.reshape(dims).clone(), labels.to(torch::kLong)};
  }

  const TrainConfig& config_;
  torch::jit::Module module_;
  std::vector<std::int64_t> shape_;
  std::vector<at::Tensor> parameters_;
  bool language_model_;
  const nn::Optimizer* lr_ = nullptr;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<libtorch::TorchModel> model_;  // after the optimizer: destroyed first
};

}  // namespace

std::string generate_text(const TrainConfig& config, const std::filesystem::path& weights,
                          const GenerateOptions& options) {
  if (config.model.kind != "torchscript" || !is_language_model(config)) {
    throw ConfigError(config.origin("model.task") +
                      ": model.task: trainer generate needs model.kind torchscript with model.task language_model");
  }
  if (config.data.kind != "text") {
    // It writes bytes: token ids of a shard mean nothing without their tokenizer.
    throw ConfigError(config.origin("data.kind") + ": data.kind: trainer generate writes bytes, so it needs a "
                      "byte-level model trained on data.kind text, not " + config.data.kind);
  }
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    throw ConfigError("--temperature: must be a finite number >= 0");
  }
  torch::jit::Module module = load_module(config);
  fill_module(module, checkpoint::read_model(weights), weights);
  module.eval();
  torch::NoGradGuard no_grad;
  std::string text = options.prompt.empty() ? std::string("\n") : options.prompt;
  std::vector<std::int64_t> tokens(text.begin(), text.end());
  for (std::int64_t& t : tokens) t &= 0xFF;  // the bytes, as unsigned values
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const auto block = static_cast<std::size_t>(config.data.text.block_size);
  for (std::int64_t i = 0; i < options.tokens; ++i) {
    const std::size_t start = tokens.size() > block ? tokens.size() - block : 0;
    const torch::Tensor context = torch::tensor(std::vector<std::int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(start), tokens.end())).unsqueeze(0);
    const torch::Tensor logits = module.forward({context}).toTensor()[0][-1].to(torch::kFloat);
    const std::int64_t next =
        options.temperature == 0
            ? logits.argmax().item<std::int64_t>()
            : torch::multinomial(torch::softmax(logits / options.temperature, 0), 1, false, generator).item<std::int64_t>();
    tokens.push_back(next);
    text.push_back(static_cast<char>(static_cast<unsigned char>(next)));
  }
  return text;
}

std::unique_ptr<ExternalModel> make_torchscript_model(const TrainConfig& config, std::size_t features,
                                                      std::size_t classes) {
  torch::manual_seed(static_cast<std::uint64_t>(config.seed));
  torch::jit::Module module = load_module(config);
  const std::vector<std::int64_t> shape = is_language_model(config)
                                              ? std::vector<std::int64_t>{static_cast<std::int64_t>(features) - 1}
                                              : input_shape(config, features);
  check_on_dummy_batch(config, module, shape, classes);
  return std::make_unique<TorchScriptModel>(config, std::move(module), shape);
}

}  // namespace mpitrain::app
