#pragma once
// llm.c's token shard format (`.bin`, as llm.c's dev/data scripts write pre-tokenised
// corpora): a header of 256 int32 little-endian words (word 0 the magic 20240520, word 1 the
// version, 1 for uint16 tokens, word 2 the token count, the rest 0), then `count` uint16
// little-endian token ids, nothing after them. models/write_token_shard.py writes one from a
// text file.
//
// The readers check the whole file before returning, so that a damaged shard ends a run at
// start-up, naming the file and what is wrong, not mid-epoch. Cost: read_token_shards maps
// each file (mapped_file.hpp: the ranks of a node share its pages in the page cache, no
// private copy; on a big-endian host the tokens are copied, byte-swapped) and makes one pass
// over its tokens for the vocabulary check; read_token_shard copies one file's tokens.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "mpitrain/data/token_sequence.hpp"

namespace mpitrain::data {

inline constexpr std::int32_t kTokenShardMagic = 20240520;
inline constexpr std::int32_t kTokenShardVersion = 1;  // uint16 tokens
inline constexpr std::size_t kTokenShardHeaderBytes = 256 * 4;

struct TokenCorpus {
  TokenSequence<std::uint16_t> tokens;  // the shards' tokens in file order, one piece a file
  std::vector<std::filesystem::path> files;
};

// Returns the tokens of the shard `file`. Throws std::runtime_error naming the file and the
// defect: it cannot be read; it is shorter than the header; the magic is not 20240520; the
// version is not 1; the count is negative; fewer tokens follow than the count says
// (truncated), or more bytes (the count does not match the file's size); or a token is not
// below `vocab` (its position in the file's tokens).
std::vector<std::uint16_t> read_token_shard(const std::filesystem::path& file, std::size_t vocab);

// Returns the tokens of a shard file, or of every file matching a glob pattern (`*`, `?`,
// `[...]`, as the shell's) in name order, concatenated, each file memory-mapped for as long as
// the returned tokens (or a copy of them) live. Throws std::runtime_error naming the pattern
// when no file matches it (or the file does not exist), and as read_token_shard.
TokenCorpus read_token_shards(const std::string& pattern, std::size_t vocab);

// Writes `tokens` as a shard to `file` (the format above). Throws std::runtime_error naming
// the file when it cannot be written.
void write_token_shard(const std::filesystem::path& file, std::span<const std::uint16_t> tokens);

}  // namespace mpitrain::data
