// MappedFile: a file's bytes exactly, an empty file, errors naming the file and the call,
// and a move that hands the mapping over.

#include "mpitrain/data/mapped_file.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "temp_dir.hpp"

namespace mpitrain::data {
namespace {

namespace fs = std::filesystem;

class MappedFileTest : public ::testing::Test {
 protected:
  // Writes `size` bytes, byte i being i % 251, to `name`.
  fs::path write(const std::string& name, std::size_t size) const {
    std::vector<char> bytes(size);
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i % 251);
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(size));
    return p;
  }

  // Returns the message of MappedFile's error for `path`.
  static std::string error_of(const fs::path& path) {
    try {
      const MappedFile map(path);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(no error)";
  }

  const test_support::TempDir temp_{"mapped_file"};
  const fs::path dir_ = temp_.path();
};

TEST_F(MappedFileTest, GivesTheFilesBytes) {
  // More than a page, not a whole number of pages.
  const MappedFile map(write("a.bin", 10000));
  ASSERT_EQ(map.bytes().size(), 10000u);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < 10000; ++i) wrong += map.bytes()[i] != std::byte(i % 251);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(map.bytes().data()) % 4096, 0u);  // page-aligned
}

TEST_F(MappedFileTest, AnEmptyFileMapsNothing) {
  const MappedFile map(write("empty.bin", 0));
  EXPECT_TRUE(map.bytes().empty());
}

TEST_F(MappedFileTest, ErrorsNameTheFileAndTheCall) {
  const fs::path missing = dir_ / "missing.bin";
  EXPECT_EQ(error_of(missing), "cannot map '" + missing.string() + "': open: No such file or directory");
  EXPECT_EQ(error_of(dir_), "cannot map '" + dir_.string() + "': not a regular file");
}

TEST_F(MappedFileTest, AMoveHandsTheMappingOver) {
  MappedFile first(write("b.bin", 100));
  const std::byte* address = first.bytes().data();
  MappedFile second(std::move(first));
  EXPECT_TRUE(first.bytes().empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(second.bytes().data(), address);
  MappedFile third(write("c.bin", 5));
  third = std::move(second);
  EXPECT_EQ(third.bytes().data(), address);
  EXPECT_EQ(third.bytes()[99], std::byte(99));
}

}  // namespace
}  // namespace mpitrain::data
