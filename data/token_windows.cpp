#include "mpitrain/data/token_windows.hpp"

#include <stdexcept>

namespace mpitrain::data {

template <typename Token>
TokenWindows<Token>::TokenWindows(TokenSequence<Token> tokens, std::size_t begin,
                                  std::size_t end, std::size_t block_size, std::size_t vocab, std::string name,
                                  std::string unit)
    : tokens_(std::move(tokens)), begin_(begin), end_(end), block_size_(block_size), vocab_(vocab), windows_(0),
      name_(std::move(name)), unit_(std::move(unit)), feature_shape_{block_size + 1} {
  if (block_size_ == 0) throw std::invalid_argument(name_ + ": block_size must be at least 1");
  if (begin_ > end_ || end_ > tokens_.size()) {
    throw std::invalid_argument(name_ + ": range [" + std::to_string(begin_) + ", " + std::to_string(end_) +
                                ") is not inside the " + std::to_string(tokens_.size()) + " tokens");
  }
  windows_ = end_ - begin_ > block_size_ ? (end_ - begin_ - 1) / block_size_ : 0;
  if (windows_ == 0) {
    throw std::invalid_argument(name_ + " holds " + std::to_string(end_ - begin_) +
                                " tokens, fewer than one window of block_size + 1 = " + std::to_string(block_size_ + 1));
  }
}

template <typename Token>
std::string TokenWindows<Token>::describe() const {
  return name_ + " (" + std::to_string(windows_) + " windows of " + std::to_string(block_size_ + 1) + " " + unit_ +
         ")";
}

template <typename Token>
void TokenWindows<Token>::read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                                     std::span<std::int32_t> labels_out) const {
  const std::size_t width = block_size_ + 1;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    tokens_.copy_to(begin_ + indices[k] * block_size_, features_out.subspan(k * width, width));
    labels_out[k] = 0;
  }
}

template class TokenWindows<std::uint8_t>;
template class TokenWindows<std::uint16_t>;

}  // namespace mpitrain::data
