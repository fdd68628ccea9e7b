#pragma once
// TextDataset: byte-level language-modelling examples over UTF-8 text. The tokens are the
// text's bytes (a vocabulary of 256), cut into windows as token_windows.hpp describes
// (block_size + 1 tokens stepping by block_size; features the token values 0..255 as fp32).
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

#include "mpitrain/data/token_windows.hpp"

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

class TextDataset final : public TokenWindows<std::uint8_t> {
 public:
  // The windows of bytes [begin, end) of `tokens` (TokenWindows with a vocabulary of 256).
  // `name` describes the range in logs ("fortunes, bytes 0-2326379"); describe() is
  // "text NAME (W windows of B byte tokens)". Throws std::invalid_argument as TokenWindows.
  TextDataset(std::shared_ptr<const std::vector<std::uint8_t>> tokens, std::size_t begin, std::size_t end,
              std::size_t block_size, const std::string& name)
      : TokenWindows(TokenSequence<std::uint8_t>(std::move(tokens)), begin, end, block_size, 256,
                     "text " + name, "byte tokens") {}
};

}  // namespace mpitrain::data
