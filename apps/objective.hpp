#pragma once
// Objective: what a model kind is trained to minimise and how it is judged on the test set.
// The model kind chooses it (model_from_config.hpp; mlp: ClassificationObjective, softmax
// cross-entropy and accuracy), so neither the training step nor the evaluation assumes one.
//
// Evaluation scores each real test example on its own rank: one (loss, metric) row per
// example. The trainer gathers every rank's rows once (Engine::gather_for_metrics) and
// reports both means over the whole test set, so each metric must be a mean over examples.

#include <string>
#include <vector>

#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::app {

class Objective {
 public:
  virtual ~Objective() = default;

  // Returns the mean loss of `output`, the model's output for every row of `batch`, and
  // writes d(loss)/d(output) into `grad` (resized if needed, so a loop can reuse it).
  virtual float loss(const Tensor& output, const data::Batch& batch, Tensor& grad) const = 0;
  // Appends two values per real example of `batch` (its first real_count rows) to `rows`:
  // the example's loss and its metric.
  virtual void score(const Tensor& output, const data::Batch& batch, std::vector<float>& rows) const = 0;
  // Returns the mean metric over a test set as the progress messages show it
  // ("accuracy 88.68%").
  virtual std::string describe_metric(double mean) const = 0;
  // Returns the metric's key in metrics.jsonl's eval lines.
  virtual std::string metric_name() const { return "accuracy"; }
};

}  // namespace mpitrain::app
