#pragma once
// LanguageModelObjective: next-token cross-entropy of a language model, judged in bits per
// token. A batch's features are windows of block_size + 1 token ids (data::TokenWindows: the
// bytes of text, or the ids of token shards); the model's output for a window is
// (block_size, vocab) logits, row t predicting token t + 1. An example's loss is the mean
// cross-entropy over its block_size predictions in nats (computed in double from the fp32
// logits), its metric the same in bits: loss / ln 2, bits per byte for text (a token is a
// byte), bits per token for token shards. Every window has block_size predictions, so the
// means over examples are the means over tokens; the perplexity is exp(mean loss) =
// 2^(bits per token). Training's loss is the model's own (torchscript_model.cpp, torch's
// cross_entropy).

#include <cstddef>
#include <string>

#include "objective.hpp"

namespace mpitrain::app {

class LanguageModelObjective final : public Objective {
 public:
  // `vocab`: the logits per position (256 for bytes); `unit`: what a token is in the
  // metric's name, "byte" or "token".
  LanguageModelObjective(std::size_t vocab, std::string unit) : vocab_(vocab), unit_(std::move(unit)) {}
  // Not used: only an ExternalModel trains a language model, with its own loss. Throws
  // std::logic_error.
  float loss(const Tensor& output, const data::Batch& batch, Tensor& grad) const override;
  // `output`: (rows, block_size * vocab) or (rows, block_size, vocab) logits.
  void score(const Tensor& output, const data::Batch& batch, std::vector<float>& rows) const override;
  // "1.8321 bits per byte (perplexity 3.56)".
  std::string describe_metric(double mean) const override;
  // "bits_per_byte" or "bits_per_token".
  std::string metric_name() const override { return "bits_per_" + unit_; }

 private:
  std::size_t vocab_;
  std::string unit_;
};

}  // namespace mpitrain::app
