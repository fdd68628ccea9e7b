#include "mpitrain/data/token_shard.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace mpitrain::data {
namespace {

namespace fs = std::filesystem;

// A folder of its own per test, removed at the end.
class TokenShard : public ::testing::Test {
 protected:
  // Writes a file of the given header words (the rest of the 256 zero) and payload bytes,
  // built by hand, independently of write_token_shard.
  fs::path raw(const std::string& name, const std::vector<std::int32_t>& words, const std::vector<std::uint8_t>& payload,
               std::size_t header_bytes = 1024) {
    std::vector<std::uint8_t> bytes(header_bytes, 0);
    for (std::size_t i = 0; i < words.size() && 4 * i + 3 < header_bytes; ++i) {
      for (std::size_t b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(words[i]) >> (8 * b));
    }
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                             static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  // Returns the message of read_token_shard's error for `file`.
  static std::string error_of(const fs::path& file, std::size_t vocab = 65536) {
    try {
      read_token_shard(file, vocab);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(no error)";
  }

  const test_support::TempDir temp_{"token_shard"};
  const fs::path dir_ = temp_.path();
};

// Returns the tokens of `tokens` in a vector.
std::vector<std::uint16_t> all(const TokenSequence<std::uint16_t>& tokens) {
  std::vector<std::uint16_t> out(tokens.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = tokens[i];
  return out;
}

TEST_F(TokenShard, ReadsLittleEndianTokensAfterTheHeader) {
  // Tokens 1, 258 (0x0102), 65535 as little-endian pairs.
  const fs::path p = raw("a.bin", {20240520, 1, 3}, {1, 0, 2, 1, 0xFF, 0xFF});
  EXPECT_EQ(read_token_shard(p, 65536), (std::vector<std::uint16_t>{1, 258, 65535}));
  EXPECT_TRUE(read_token_shard(raw("empty.bin", {20240520, 1, 0}, {}), 1).empty());
}

TEST_F(TokenShard, WriteThenReadIsTheIdentity) {
  const std::vector<std::uint16_t> tokens{0, 7, 50256, 300, 9};
  write_token_shard(dir_ / "w.bin", tokens);
  EXPECT_EQ(fs::file_size(dir_ / "w.bin"), 1024u + 10u);
  EXPECT_EQ(read_token_shard(dir_ / "w.bin", 50257), tokens);
}

TEST_F(TokenShard, NamesTheFileAndTheDefect) {
  const fs::path magic = raw("magic.bin", {20240521, 1, 1}, {0, 0});
  EXPECT_EQ(error_of(magic), "token shard '" + magic.string() +
                                 "': magic number 20240521, not llm.c's 20240520 (not a token shard)");
  const fs::path version = raw("version.bin", {20240520, 2, 1}, {0, 0, 0, 0});
  EXPECT_EQ(error_of(version),
            "token shard '" + version.string() + "': version 2, not 1 (uint16 tokens, the only version read)");
  const fs::path header = raw("header.bin", {20240520, 1, 0}, {}, 1000);
  EXPECT_EQ(error_of(header),
            "token shard '" + header.string() + "': truncated: 1000 bytes, shorter than the 1024-byte header");
  const fs::path cut = raw("cut.bin", {20240520, 1, 3}, {1, 0, 2, 0, 3});
  EXPECT_EQ(error_of(cut), "token shard '" + cut.string() +
                               "': truncated: the header says 3 tokens, but 5 bytes follow it (6 needed)");
  const fs::path longer = raw("longer.bin", {20240520, 1, 1}, {1, 0, 2, 0});
  EXPECT_EQ(error_of(longer), "token shard '" + longer.string() +
                                  "': the header's count of 1 tokens (2 bytes) does not match the 4 bytes after "
                                  "the header");
  const fs::path negative = raw("negative.bin", {20240520, 1, -1}, {});
  EXPECT_EQ(error_of(negative), "token shard '" + negative.string() + "': negative token count -1");
  EXPECT_NE(error_of(dir_ / "missing.bin").find("missing.bin': cannot read it: "), std::string::npos);
}

TEST_F(TokenShard, RefusesATokenOutsideTheVocabularyNamingItsPosition) {
  const fs::path p = raw("vocab.bin", {20240520, 1, 4}, {10, 0, 255, 0, 0, 1, 3, 0});
  EXPECT_EQ(read_token_shard(p, 257).size(), 4u);
  EXPECT_EQ(error_of(p, 256),
            "token shard '" + p.string() + "': token 2 (of 4) is 256, not below the vocabulary size 256");
}

TEST_F(TokenShard, ReadsAPatternsFilesInNameOrder) {
  write_token_shard(dir_ / "train_001.bin", std::vector<std::uint16_t>{3, 4});
  write_token_shard(dir_ / "train_000.bin", std::vector<std::uint16_t>{1, 2});
  write_token_shard(dir_ / "val_000.bin", std::vector<std::uint16_t>{9});
  const TokenCorpus corpus = read_token_shards((dir_ / "train_*.bin").string(), 10);
  EXPECT_EQ(all(corpus.tokens), (std::vector<std::uint16_t>{1, 2, 3, 4}));
  EXPECT_EQ(corpus.tokens.piece_count(), 2u);  // one piece a file
  ASSERT_EQ(corpus.files.size(), 2u);
  EXPECT_EQ(corpus.files[0].filename(), "train_000.bin");
  EXPECT_EQ(all(read_token_shards((dir_ / "val_000.bin").string(), 10).tokens), (std::vector<std::uint16_t>{9}));
  try {
    read_token_shards((dir_ / "test_*.bin").string(), 10);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no token shard file '" + (dir_ / "test_*.bin").string() + "'"),
              std::string::npos)
        << e.what();
  }
  // A bad shard among good ones is named.
  raw("train_002.bin", {1, 1, 0}, {});
  try {
    read_token_shards((dir_ / "train_*.bin").string(), 10);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("train_002.bin': magic number 1,"), std::string::npos) << e.what();
  }
}

TEST_F(TokenShard, ACorpusReadsItsFilesMappingsNotACopy) {
  // The tokens are the files' pages (shared by the ranks of a node), not a private copy: a
  // token changed in the file in place shows through. (A shard must not change while a run
  // reads it; here it does, on purpose, to show where the tokens are read from.)
  write_token_shard(dir_ / "m_000.bin", std::vector<std::uint16_t>{1, 2});
  write_token_shard(dir_ / "m_001.bin", std::vector<std::uint16_t>{3});
  const TokenCorpus corpus = read_token_shards((dir_ / "m_*.bin").string(), 10);
  ASSERT_EQ(all(corpus.tokens), (std::vector<std::uint16_t>{1, 2, 3}));
  {
    std::fstream f(dir_ / "m_001.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(1024);
    const char seven[2] = {7, 0};
    f.write(seven, 2);
  }
  EXPECT_EQ(corpus.tokens[2], 7);
  // A copy of the tokens keeps the mappings after the corpus is gone.
  TokenSequence<std::uint16_t> kept;
  {
    const TokenCorpus again = read_token_shards((dir_ / "m_*.bin").string(), 10);
    kept = again.tokens;
  }
  EXPECT_EQ(all(kept), (std::vector<std::uint16_t>{1, 2, 7}));
}

}  // namespace
}  // namespace mpitrain::data
