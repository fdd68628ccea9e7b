#pragma once
// The trainer's model.kind torchscript: a module saved by torch.jit.save (model.path),
// loaded and trained in C++ with libtorch through mpitrain::libtorch::TorchModel (no Python
// at run time). model.task classification: the output is (batch, classes) logits, trained
// with softmax cross-entropy (torch's, in fp32) and judged by accuracy
// (ClassificationObjective). model.input_shape reshapes each example's flat features (the
// IDX reader's pixel / 255 values) into the shape the module takes: [1, 28, 28] gives
// (batch, 1, 28, 28).
//
// Checked once at start-up, each a ConfigError (exit 2) naming the key and where it was set:
// model.path missing or not a TorchScript module; model.input_shape not holding the data's
// feature count; a forward on a dummy batch of 2 examples (evaluation mode, no gradient)
// that fails, or an output that is not (2, classes).
//
// Optimizer: optimizer.kind adamw is torch::optim::AdamW, sgd is torch::optim::SGD, with the
// config's hyper-parameters (the same torch.optim semantics as the native ones), built over
// the module's parameters with each tied tensor once. Checkpoints hold the torch optimizer's
// state (/optimizer, kind torch.adamw or torch.sgd) and the BatchNorm buffers (/buffers).
// torch's intra-op threads: the cores divided by the ranks on the node (at least 1).
//
// Built only with libtorch (MPITRAIN_TORCH): without it, make_torchscript_model throws the
// ConfigError "model.kind: ... the trainer was built without libtorch".

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "external_model.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// Returns the TorchScript model of `config.model` for examples of `features` values and
// `classes` classes, checked as above. torch's random generator is seeded with config.seed.
std::unique_ptr<ExternalModel> make_torchscript_model(const TrainConfig& config, std::size_t features,
                                                      std::size_t classes);

struct GenerateOptions {
  std::string prompt;         // UTF-8 text the model continues ("": a newline)
  std::int64_t tokens = 0;    // bytes to generate
  double temperature = 1.0;   // logits / temperature before sampling; 0: the most likely byte
  std::uint64_t seed = 0;     // of the sampler's torch generator
};

// Returns the prompt followed by `options.tokens` bytes sampled one at a time from the
// language model of `config.model` (model.task language_model) with the weights of
// `weights` (a checkpoint folder or a model.h5 / .safetensors, checkpoint::read_model;
// data.kind text, since it writes bytes): each
// step feeds the last data.text.block_size bytes and samples from softmax(logits of the last
// position / temperature). Throws ConfigError for a config that is not such a model (or a
// temperature < 0), std::runtime_error naming the tensor when the weights do not fit.
std::string generate_text(const TrainConfig& config, const std::filesystem::path& weights,
                          const GenerateOptions& options);

}  // namespace mpitrain::app
