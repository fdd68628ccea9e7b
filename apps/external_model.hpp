#pragma once
// ExternalModel: a model the trainer trains through the Engine's bring-your-own-model path
// (Engine::register_parameters, set_optimizer, register_buffers) rather than as an
// nn::Module: model.kind torchscript (torchscript_model.hpp, libtorch). The training run
// drives it as it drives an nn::Module: one train_batch() per micro-batch inside the
// engine's accumulate() guard, then the engine's clipping and step(), then zero_grad().
//
// The learning rate: the trainer's scheduler sets it on an nn::Optimizer that holds no
// parameters (LearningRate below); the model's own optimizer takes that rate before each
// micro-batch, so the schedule is the same as for an nn::Module.

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>

#include "mpitrain/checkpoint/save_model.hpp"
#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/optimizer.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::app {

// An nn::Optimizer of no parameters that only holds the learning rate a scheduler sets. Its
// state is empty: the rate is part of the model's optimizer state and the scheduler's.
class LearningRate final : public nn::Optimizer {
 public:
  explicit LearningRate(double lr) : nn::Optimizer({}, lr) {}
  void step() override {}
  std::string kind() const override { return "learning_rate"; }
  StateDict state_dict() const override { return {}; }
  void load_state_dict(const StateDict&) override {}
};

class ExternalModel {
 public:
  virtual ~ExternalModel() = default;

  // Registers the model's parameters, buffers and its optimizer (built from the config's
  // optimizer.* keys) with `engine`. `lr` gives the rate of every step (it must outlive the
  // model). Collective.
  virtual void prepare(Engine& engine, const nn::Optimizer& lr) = 0;
  // Returns the mean loss of `batch` after its forward and the engine's backward (the
  // gradients are reduced on a synchronising micro-step). Collective on such a step.
  virtual float train_batch(const data::Batch& batch) = 0;
  // Zeroes the gradients after a synchronising micro-step (the engine's zero_grad).
  virtual void zero_grad() = 0;
  // Evaluation mode on (false: training mode again). Turning it on is collective: rank 0's
  // buffers (BatchNorm statistics) are broadcast, so every rank evaluates the same model.
  virtual void set_training(bool training) = 0;
  // Returns the model's output for `batch` as an fp32 tensor, without gradients: (rows,
  // classes) logits for classification.
  virtual Tensor output(const data::Batch& batch) = 0;
  // Collective: rank 0 writes the weights to `dir` (model.h5 or model.safetensors, torch
  // names). Returns the file.
  virtual std::filesystem::path save_model(const std::filesystem::path& dir, checkpoint::ModelFormat format) = 0;
  // Returns the number of trained values (each tied tensor once).
  virtual std::size_t parameter_count() const = 0;
  // Replaces the weights (every parameter and fp32 buffer, by torch name) with those of
  // `weights` (checkpoint::read_model of `from`). Throws std::runtime_error naming `from` and
  // the first tensor missing or of another shape.
  virtual void load_weights(const std::map<std::string, Tensor>& weights, const std::filesystem::path& from) = 0;
  // Takes the model off the engine (hooks, gradient views; prepare() undone). Call it before
  // the engine is destroyed: the engine outlives what prepare() attached to it.
  virtual void unprepare() = 0;
};

}  // namespace mpitrain::app
