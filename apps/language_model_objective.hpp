#pragma once
// LanguageModelObjective: next-token cross-entropy of a byte-level language model, judged in
// bits per byte. A batch's features are windows of block_size + 1 byte tokens (TextDataset);
// the model's output for a window is (block_size, 256) logits, row t predicting token t + 1.
// An example's loss is the mean cross-entropy over its block_size predictions in nats
// (computed in double from the fp32 logits), its metric the same in bits: loss / ln 2, bits
// per byte (a token is a byte). Every window has block_size predictions, so the means over
// examples are the means over tokens; the perplexity is exp(mean loss) = 2^(bits per byte).
// Training's loss is the model's own (torchscript_model.cpp, torch's cross_entropy).

#include "objective.hpp"

namespace mpitrain::app {

class LanguageModelObjective final : public Objective {
 public:
  // Not used: only an ExternalModel trains a language model, with its own loss. Throws
  // std::logic_error.
  float loss(const Tensor& output, const data::Batch& batch, Tensor& grad) const override;
  // `output`: (rows, block_size * 256) or (rows, block_size, 256) logits.
  void score(const Tensor& output, const data::Batch& batch, std::vector<float>& rows) const override;
  // "1.8321 bits per byte (perplexity 3.56)".
  std::string describe_metric(double mean) const override;
  std::string metric_name() const override { return "bits_per_byte"; }
};

}  // namespace mpitrain::app
