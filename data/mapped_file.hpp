#pragma once
// MappedFile: a file mapped read-only into memory (POSIX mmap), unmapped when the object ends.
//
// The pages come from the page cache when first touched and are shared by every process that
// maps the same file: the ranks of one node reading one token corpus hold it once, in the
// page cache, instead of one private copy per rank; pages not touched lately may be dropped
// and read again. The file must not be changed while it is mapped.

#include <cstddef>
#include <filesystem>
#include <span>

namespace mpitrain::data {

class MappedFile {
 public:
  // Maps `path` whole (an empty file maps nothing). Throws std::runtime_error naming the file,
  // the call that failed (open, fstat, mmap) and the system's reason.
  explicit MappedFile(const std::filesystem::path& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Returns the file's bytes (page-aligned; empty for an empty file).
  std::span<const std::byte> bytes() const noexcept { return {address_, size_}; }

 private:
  void unmap() noexcept;

  const std::byte* address_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace mpitrain::data
