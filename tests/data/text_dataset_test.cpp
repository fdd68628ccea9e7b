#include "mpitrain/data/text_dataset.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "temp_dir.hpp"

namespace mpitrain::data {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const std::vector<std::uint8_t>> bytes_of(const std::string& text) {
  return std::make_shared<const std::vector<std::uint8_t>>(text.begin(), text.end());
}

TEST(TextDataset, WindowsOfBlockSizePlusOneStepByBlockSize) {
  // "abcdefghij" [1, 10): "bcdefghij", 9 tokens; block 3: windows at 1, 4 (7 + 4 > 10).
  const TextDataset d(bytes_of("abcdefghij"), 1, 10, 3, "letters");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.feature_size(), 4u);
  EXPECT_EQ(d.num_classes(), 256u);
  std::vector<float> f(8);
  std::vector<std::int32_t> labels(2, -1);
  const std::vector<std::size_t> order{1, 0};
  d.get_batch(order, f, labels);
  EXPECT_EQ(f, (std::vector<float>{'e', 'f', 'g', 'h', 'b', 'c', 'd', 'e'}));
  EXPECT_EQ(labels, (std::vector<std::int32_t>{0, 0}));
  EXPECT_EQ(d.describe(), "text letters (2 windows of 4 byte tokens)");
}

TEST(TextDataset, RefusesARangeWithoutAWindow) {
  EXPECT_THROW(TextDataset(bytes_of("abc"), 0, 3, 3, "short"), std::invalid_argument);
  EXPECT_THROW(TextDataset(bytes_of("abc"), 0, 4, 1, "outside"), std::invalid_argument);
  EXPECT_THROW(TextDataset(bytes_of("abc"), 0, 3, 0, "zero"), std::invalid_argument);
  EXPECT_EQ(TextDataset(bytes_of("abcd"), 0, 4, 3, "one").size(), 1u);
}

TEST(TextDataset, Utf8Check) {
  const auto check = [](const std::string& s) {
    return first_invalid_utf8(std::vector<std::uint8_t>(s.begin(), s.end()));
  };
  EXPECT_EQ(check("plain ascii\n"), std::nullopt);
  EXPECT_EQ(check("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), std::nullopt);
  EXPECT_EQ(check("ab\xC3"), 2u);          // cut short
  EXPECT_EQ(check("a\xC0\xAF"), 1u);       // overlong
  EXPECT_EQ(check("a\xED\xA0\x80"), 1u);   // surrogate
  EXPECT_EQ(check("\xF4\x90\x80\x80"), 0u);  // beyond U+10FFFF
  EXPECT_EQ(check("ok\xFF"), 2u);
}

TEST(TextDataset, ReadsAFolderInNameOrderWithoutLinksAndIndexes) {
  const test_support::TempDir temp("text_dataset");
  const fs::path& dir = temp.path();
  std::ofstream(dir / "b") << "second\n";
  std::ofstream(dir / "a") << "first\n";
  std::ofstream(dir / "a.dat") << "\xFF\xFF index";
  fs::create_symlink(dir / "a", dir / "a.u8");
  const TextCorpus corpus = read_text_files(dir);
  EXPECT_EQ(std::string(corpus.bytes.begin(), corpus.bytes.end()), "first\nsecond\n");
  ASSERT_EQ(corpus.files.size(), 2u);
  EXPECT_EQ(corpus.files[0].filename(), "a");
  EXPECT_EQ(read_text_files(dir / "b").bytes.size(), 7u);
  std::ofstream(dir / "c") << "bad \xC3(";
  try {
    read_text_files(dir);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/c' is not valid UTF-8 (byte 4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_text_files(dir / "missing"), std::runtime_error);
}

}  // namespace
}  // namespace mpitrain::data
