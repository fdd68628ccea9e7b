#include "mpitrain/data/token_shard.hpp"

#include <glob.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "mpitrain/data/mapped_file.hpp"

namespace mpitrain::data {
namespace {

namespace fs = std::filesystem;

// Returns the little-endian 32-bit word `i` of `header`.
std::int32_t header_word(const std::array<unsigned char, kTokenShardHeaderBytes>& header, std::size_t i) {
  const unsigned char* b = header.data() + 4 * i;
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(b[0]) | static_cast<std::uint32_t>(b[1]) << 8 |
                                   static_cast<std::uint32_t>(b[2]) << 16 | static_cast<std::uint32_t>(b[3]) << 24);
}

std::runtime_error shard_error(const fs::path& file, const std::string& what) {
  return std::runtime_error("token shard '" + file.string() + "': " + what);
}

// Throws naming the first token of `tokens` that is not below `vocab`.
void check_vocabulary(const fs::path& file, std::span<const std::uint16_t> tokens, std::size_t vocab) {
  const auto bad = std::find_if(tokens.begin(), tokens.end(), [vocab](std::uint16_t t) { return t >= vocab; });
  if (bad != tokens.end()) {
    throw shard_error(file, "token " + std::to_string(bad - tokens.begin()) + " (of " + std::to_string(tokens.size()) +
                                ") is " + std::to_string(*bad) + ", not below the vocabulary size " +
                                std::to_string(vocab));
  }
}

// Returns `file` mapped into memory; throws naming the file when it cannot be read.
MappedFile map_shard(const fs::path& file) {
  std::error_code size_error;
  static_cast<void>(fs::file_size(file, size_error));
  if (size_error) throw shard_error(file, "cannot read it: " + size_error.message());
  try {
    return MappedFile(file);
  } catch (const std::runtime_error& e) {
    throw shard_error(file, std::string("cannot read it: ") + e.what());
  }
}

// Returns the tokens of the shard whose bytes are `bytes` (a mapping of `file`, page-aligned),
// as they lie there (little-endian), after checking the header and the size; throws naming
// the file and the defect.
std::span<const std::uint16_t> checked_tokens(const fs::path& file, std::span<const std::byte> bytes) {
  const std::size_t size = bytes.size();
  if (size < kTokenShardHeaderBytes) {
    throw shard_error(file, "truncated: " + std::to_string(size) + " bytes, shorter than the " +
                                std::to_string(kTokenShardHeaderBytes) + "-byte header");
  }
  std::array<unsigned char, kTokenShardHeaderBytes> header{};
  std::memcpy(header.data(), bytes.data(), header.size());
  if (header_word(header, 0) != kTokenShardMagic) {
    throw shard_error(file, "magic number " + std::to_string(header_word(header, 0)) + ", not llm.c's " +
                                std::to_string(kTokenShardMagic) + " (not a token shard)");
  }
  if (header_word(header, 1) != kTokenShardVersion) {
    throw shard_error(file, "version " + std::to_string(header_word(header, 1)) +
                                ", not 1 (uint16 tokens, the only version read)");
  }
  const std::int32_t count = header_word(header, 2);
  if (count < 0) throw shard_error(file, "negative token count " + std::to_string(count));
  const std::size_t payload = size - kTokenShardHeaderBytes;
  const std::size_t wanted = 2 * static_cast<std::size_t>(count);
  if (payload < wanted) {
    throw shard_error(file, "truncated: the header says " + std::to_string(count) + " tokens, but " +
                                std::to_string(payload) + " bytes follow it (" + std::to_string(wanted) + " needed)");
  }
  if (payload > wanted) {
    throw shard_error(file, "the header's count of " + std::to_string(count) + " tokens (" + std::to_string(wanted) +
                                " bytes) does not match the " + std::to_string(payload) +
                                " bytes after the header");
  }
  // The payload starts 1024 bytes into a page-aligned mapping: aligned for uint16.
  return {reinterpret_cast<const std::uint16_t*>(bytes.data() + kTokenShardHeaderBytes),
          static_cast<std::size_t>(count)};
}

// What keeps a corpus's tokens alive: the files' mappings, or (on a big-endian host) copies.
struct ShardStorage {
  std::vector<MappedFile> maps;
  std::vector<std::vector<std::uint16_t>> copies;
};

// Returns the tokens of shard `file`, checked whole (header, size, vocabulary), in host byte
// order: a view of its mapping, kept in `storage` (on a big-endian host, of a byte-swapped
// copy kept there too). Throws naming the file and the defect.
std::span<const std::uint16_t> checked_shard(const fs::path& file, std::size_t vocab,
                                             ShardStorage& storage) {
  MappedFile map = map_shard(file);
  std::span<const std::uint16_t> tokens = checked_tokens(file, map.bytes());
  storage.maps.push_back(std::move(map));  // the mapping stays where it is
  if constexpr (std::endian::native == std::endian::big) {
    std::vector<std::uint16_t>& copy = storage.copies.emplace_back(tokens.begin(), tokens.end());
    for (std::uint16_t& t : copy) t = static_cast<std::uint16_t>(t >> 8 | t << 8);
    tokens = copy;  // a vector's elements stay put when it is moved
  }
  check_vocabulary(file, tokens, vocab);
  return tokens;
}

// Returns the files of `pattern` in name order (byte order), or the pattern itself
// when it is an existing file; throws when nothing matches.
std::vector<fs::path> matching_files(const std::string& pattern) {
  std::error_code ignored;  // not a file (or not readable): try it as a pattern
  if (fs::is_regular_file(pattern, ignored)) return {fs::path(pattern)};
  glob_t found{};
  // GLOB_ERR: a folder of the pattern that cannot be read is an error, not "no match".
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &found);
  std::vector<fs::path> files;
  if (rc == 0) {
    for (std::size_t i = 0; i < found.gl_pathc; ++i) files.emplace_back(found.gl_pathv[i]);
  }
  ::globfree(&found);
  if (rc == GLOB_NOMATCH) {
    throw std::runtime_error("no token shard file '" + pattern + "' (nor any file matching it as a pattern)");
  }
  if (rc != 0) {
    throw std::runtime_error("cannot list the token shards of '" + pattern + "': " +
                             (rc == GLOB_NOSPACE ? "out of memory" : "a folder of the pattern cannot be read"));
  }
  std::sort(files.begin(), files.end());  // glob sorts by the locale; name order is byte order
  return files;
}

}  // namespace

std::vector<std::uint16_t> read_token_shard(const fs::path& file, std::size_t vocab) {
  ShardStorage storage;
  const std::span<const std::uint16_t> tokens = checked_shard(file, vocab, storage);
  return {tokens.begin(), tokens.end()};
}

TokenCorpus read_token_shards(const std::string& pattern, std::size_t vocab) {
  TokenCorpus corpus;
  corpus.files = matching_files(pattern);
  auto storage = std::make_shared<ShardStorage>();
  std::vector<std::span<const std::uint16_t>> pieces;
  for (const fs::path& file : corpus.files) pieces.push_back(checked_shard(file, vocab, *storage));
  corpus.tokens = TokenSequence<std::uint16_t>(std::move(pieces), std::move(storage));
  return corpus;
}

void write_token_shard(const fs::path& file, std::span<const std::uint16_t> tokens) {
  std::array<unsigned char, kTokenShardHeaderBytes> header{};
  const std::array<std::uint32_t, 3> words{static_cast<std::uint32_t>(kTokenShardMagic),
                                           static_cast<std::uint32_t>(kTokenShardVersion),
                                           static_cast<std::uint32_t>(tokens.size())};
  for (std::size_t i = 0; i < words.size(); ++i) {
    for (std::size_t b = 0; b < 4; ++b) header[4 * i + b] = static_cast<unsigned char>(words[i] >> (8 * b));
  }
  std::vector<unsigned char> payload(2 * tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    payload[2 * i] = static_cast<unsigned char>(tokens[i] & 0xFF);
    payload[2 * i + 1] = static_cast<unsigned char>(tokens[i] >> 8);
  }
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), header.size());
  out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write token shard '" + file.string() + "'");
}

}  // namespace mpitrain::data
