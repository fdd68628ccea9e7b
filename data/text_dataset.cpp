#include "mpitrain/data/text_dataset.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace mpitrain::data {
namespace {

namespace fs = std::filesystem;

// Returns the files a folder contributes, in name order (see read_text_files).
std::vector<fs::path> folder_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Returns the length of the UTF-8 sequence that starts at bytes[i], or 0 when it is invalid.
std::size_t sequence_length(const std::vector<std::uint8_t>& b, std::size_t i) {
  const std::uint8_t c = b[i];
  if (c < 0x80) return 1;
  std::size_t n = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + n > b.size() || b[i + 1] < lo || b[i + 1] > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if ((b[i + k] & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::optional<std::size_t> first_invalid_utf8(const std::vector<std::uint8_t>& bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = sequence_length(bytes, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

TextCorpus read_text_files(const fs::path& path) {
  TextCorpus corpus;
  if (fs::is_directory(path)) {
    corpus.files = folder_files(path);
    if (corpus.files.empty()) throw std::runtime_error("text folder '" + path.string() + "' holds no text file");
  } else if (fs::exists(path)) {
    corpus.files = {path};
  } else {
    throw std::runtime_error("no such text file or folder '" + path.string() + "'");
  }
  for (const fs::path& file : corpus.files) {
    // Sized read, so that an I/O error partway through is an error, not a shorter corpus.
    std::error_code size_error;
    const std::uintmax_t size = fs::file_size(file, size_error);
    if (size_error) {
      throw std::runtime_error("cannot read text file '" + file.string() + "': " + size_error.message());
    }
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
    std::ifstream in(file, std::ios::binary);
    if (!in || (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))) {
      throw std::runtime_error("cannot read text file '" + file.string() + "': read " +
                               std::to_string(size > 0 ? in.gcount() : 0) + " of " + std::to_string(size) +
                               " bytes");
    }
    if (const std::optional<std::size_t> bad = first_invalid_utf8(bytes)) {
      throw std::runtime_error("text file '" + file.string() + "' is not valid UTF-8 (byte " +
                               std::to_string(*bad) + ")");
    }
    corpus.bytes.insert(corpus.bytes.end(), bytes.begin(), bytes.end());
  }
  return corpus;
}

}  // namespace mpitrain::data
