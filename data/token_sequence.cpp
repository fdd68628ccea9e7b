// TokenSequence (see token_sequence.hpp): pieces indexed by their first token.

#include "mpitrain/data/token_sequence.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace mpitrain::data {

template <typename Token>
TokenSequence<Token>::TokenSequence(std::shared_ptr<const std::vector<Token>> tokens)
    : TokenSequence(tokens ? std::vector<std::span<const Token>>{std::span<const Token>(*tokens)}
                           : std::vector<std::span<const Token>>{},
                    tokens) {}

template <typename Token>
TokenSequence<Token>::TokenSequence(std::vector<std::span<const Token>> pieces,
                                    std::shared_ptr<const void> owner)
    : owner_(std::move(owner)) {
  std::size_t at = 0;
  for (const std::span<const Token> piece : pieces) {
    if (piece.empty()) continue;
    pieces_.push_back(piece);
    starts_.push_back(at);
    at += piece.size();
  }
  starts_.push_back(at);
}

template <typename Token>
std::size_t TokenSequence<Token>::piece_of(std::size_t i) const {
  // The last start not above i; starts_ ends with size(), which i is below.
  const auto after = std::upper_bound(starts_.begin(), starts_.end(), i);
  return static_cast<std::size_t>(after - starts_.begin()) - 1;
}

template <typename Token>
Token TokenSequence<Token>::operator[](std::size_t i) const {
  const std::size_t p = piece_of(i);
  return pieces_[p][i - starts_[p]];
}

template <typename Token>
void TokenSequence<Token>::copy_to(std::size_t begin, std::span<float> out) const {
  if (begin > size() || out.size() > size() - begin) {
    throw std::out_of_range("TokenSequence: tokens [" + std::to_string(begin) + ", " +
                            std::to_string(begin + out.size()) + ") are not inside the " +
                            std::to_string(size()) + " tokens");
  }
  if (out.empty()) return;
  std::size_t p = piece_of(begin);
  std::size_t offset = begin - starts_[p];
  auto to = out.begin();
  while (to != out.end()) {
    const std::span<const Token> piece = pieces_[p].subspan(offset);
    const auto n = static_cast<std::ptrdiff_t>(
        std::min(piece.size(), static_cast<std::size_t>(out.end() - to)));
    to = std::transform(piece.begin(), piece.begin() + n, to,
                        [](Token t) { return static_cast<float>(t); });
    ++p;
    offset = 0;
  }
}

template class TokenSequence<std::uint8_t>;
template class TokenSequence<std::uint16_t>;

}  // namespace mpitrain::data
