#pragma once
// TokenWindows: language-modelling examples over a sequence of token ids, shared by the byte
// tokens of text (TextDataset) and the pre-tokenised uint16 tokens of llm.c's shards
// (token_shard.hpp). Example i is the window of block_size + 1 tokens that starts at token
// i * block_size of its range, so that the windows of an epoch cover the range once (each
// window's last token is the next one's first: the target of the window's last input). An
// example's features are the window's token ids as fp32 values (exact below 2^24, so every
// uint16 id), its label 0: a model takes tokens [0, block_size) and predicts tokens
// [1, block_size]. The DistributedSampler shuffles and shards window indices like any other
// examples, so a checkpoint's sampler position resumes the token stream exactly.
//
// Instantiated for std::uint8_t and std::uint16_t (token_windows.cpp). Cost: an example
// costs block_size + 1 conversions (TokenSequence::copy_to); the tokens are shared, not copied.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mpitrain/data/dataset.hpp"
#include "mpitrain/data/token_sequence.hpp"

namespace mpitrain::data {

template <typename Token>
class TokenWindows : public Dataset {
 public:
  // The windows of tokens [begin, end) of `tokens`: (end - begin - 1) / block_size of them
  // (a window may span two pieces of the sequence: the corpus is one stream),
  // each token id below `vocab` (the caller checked it; num_classes() reports it). `name`
  // describes the range in logs ("text fortunes, bytes 0-2326379"), `unit` its tokens
  // ("byte tokens"). Throws std::invalid_argument when block_size is 0, the range is not
  // inside `tokens`, or it holds no window (fewer than block_size + 1 tokens).
  TokenWindows(TokenSequence<Token> tokens, std::size_t begin, std::size_t end,
               std::size_t block_size, std::size_t vocab, std::string name, std::string unit);

  std::size_t size() const noexcept override { return windows_; }
  const Shape& feature_shape() const noexcept override { return feature_shape_; }
  std::optional<std::size_t> num_classes() const noexcept override { return vocab_; }
  // "NAME (W windows of B UNIT)".
  std::string describe() const override;
  std::size_t block_size() const noexcept { return block_size_; }

 protected:
  void read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                  std::span<std::int32_t> labels_out) const override;

 private:
  TokenSequence<Token> tokens_;
  std::size_t begin_, end_, block_size_, vocab_, windows_;
  std::string name_, unit_;
  Shape feature_shape_;
};

extern template class TokenWindows<std::uint8_t>;
extern template class TokenWindows<std::uint16_t>;

}  // namespace mpitrain::data
