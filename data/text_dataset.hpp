#pragma once
// TextDataset: byte-level language-modelling examples over UTF-8 text. The tokens are the
// text's bytes (a vocabulary of 256); example i is the window of block_size + 1 tokens that
// starts at token i * block_size of its range, so that the windows of an epoch cover the
// range once (each window's last token is the next one's first: the target of the window's
// last input). An example's features are the window's tokens as fp32 values 0..255 (exact),
// its label 0: a model takes tokens [0, block_size) and predicts tokens [1, block_size].
// The DistributedSampler shuffles and shards window indices like any other examples, so a
// checkpoint's sampler position resumes the text exactly.
//
// read_text_files() reads the corpus: a file, or a folder's files. Cost: reading is one pass
// over the files (and the UTF-8 check); an example costs block_size + 1 copies.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/data/dataset.hpp"

namespace mpitrain::data {

struct TextCorpus {
  std::vector<std::uint8_t> bytes;  // the files' contents, concatenated in order
  std::vector<std::filesystem::path> files;
};

// Returns the bytes of `path`: a file, or a folder's regular files in name order (symbolic
// links and `*.dat` files left out: the Debian fortunes package's `.u8` links and strfile
// indexes). Throws std::runtime_error naming the file when `path` does not exist, a file
// cannot be read, a folder holds no file, or a file is not valid UTF-8 (with the byte offset).
TextCorpus read_text_files(const std::filesystem::path& path);

// Returns the offset of the first byte of `bytes` that is not part of valid UTF-8 (overlong
// forms, surrogates and code points beyond U+10FFFF are invalid), or nullopt when all are.
std::optional<std::size_t> first_invalid_utf8(const std::vector<std::uint8_t>& bytes);

class TextDataset final : public Dataset {
 public:
  // The windows of tokens [begin, end) of `tokens`: (end - begin - 1) / block_size of them.
  // `name` describes the range in logs ("fortunes, bytes 0-2326379"). Throws
  // std::invalid_argument when block_size is 0, the range is not inside `tokens`, or it
  // holds no window (fewer than block_size + 1 tokens).
  TextDataset(std::shared_ptr<const std::vector<std::uint8_t>> tokens, std::size_t begin, std::size_t end,
              std::size_t block_size, std::string name);

  std::size_t size() const noexcept override { return windows_; }
  const Shape& feature_shape() const noexcept override { return feature_shape_; }
  std::optional<std::size_t> num_classes() const noexcept override { return 256; }
  std::string describe() const override;
  std::size_t block_size() const noexcept { return block_size_; }

 protected:
  void read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                  std::span<std::int32_t> labels_out) const override;

 private:
  std::shared_ptr<const std::vector<std::uint8_t>> tokens_;
  std::size_t begin_, end_, block_size_, windows_;
  std::string name_;
  Shape feature_shape_;
};

}  // namespace mpitrain::data
