#pragma once
// TokenSequence: token ids held in one or more contiguous pieces and read as one sequence
// (the files of a token corpus, each memory-mapped; or the bytes of a text in one vector),
// with what keeps the pieces alive. Copies share the pieces: no token is copied.
//
// Instantiated for std::uint8_t and std::uint16_t (token_sequence.cpp). Cost of
// copy_to(begin, out): a binary search over the P pieces (log P steps) for the piece holding
// `begin`, then out.size() conversions, continuing into the following pieces as needed.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace mpitrain::data {

template <typename Token>
class TokenSequence {
 public:
  TokenSequence() = default;  // no tokens
  // One piece: the whole vector, kept alive by the sequence.
  explicit TokenSequence(std::shared_ptr<const std::vector<Token>> tokens);
  // The pieces in order (empty ones allowed), kept alive by `owner`.
  TokenSequence(std::vector<std::span<const Token>> pieces, std::shared_ptr<const void> owner);

  // Returns the number of tokens in all pieces.
  std::size_t size() const noexcept { return starts_.empty() ? 0 : starts_.back(); }
  // Returns the number of non-empty pieces.
  std::size_t piece_count() const noexcept { return pieces_.size(); }
  // Returns token `i` (i < size()).
  Token operator[](std::size_t i) const;
  // Writes tokens [begin, begin + out.size()) into `out` as fp32 values (exact for every
  // uint16 id). Throws std::out_of_range when the range passes size().
  void copy_to(std::size_t begin, std::span<float> out) const;

 private:
  // Returns the index of the piece holding token i (i < size()).
  std::size_t piece_of(std::size_t i) const;

  std::vector<std::span<const Token>> pieces_;  // non-empty
  std::vector<std::size_t> starts_;             // first token of each piece, then size()
  std::shared_ptr<const void> owner_;
};

extern template class TokenSequence<std::uint8_t>;
extern template class TokenSequence<std::uint16_t>;

}  // namespace mpitrain::data
