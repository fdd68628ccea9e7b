#pragma once
// ClassificationObjective: softmax cross-entropy over class logits (nn::cross_entropy), judged
// by accuracy. The model's output is (batch, classes) logits; labels are class indices.
// Evaluation's per-example loss is the same cross-entropy, computed in double from the fp32
// logits (log-sum-exp after subtracting the row maximum); its metric is 1 when the arg-max
// logit (the first, on ties) is the label, else 0.

#include "objective.hpp"

namespace mpitrain::app {

class ClassificationObjective final : public Objective {
 public:
  float loss(const Tensor& output, const data::Batch& batch, Tensor& grad) const override;
  void score(const Tensor& output, const data::Batch& batch, std::vector<float>& rows) const override;
  std::string describe_metric(double mean) const override;
};

}  // namespace mpitrain::app
