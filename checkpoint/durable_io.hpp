#pragma once
// Durable file-system operations for the commit protocol: data reaches the disk (fsync)
// before the step that makes it visible (a rename, a manifest) happens. Every failure throws
// CheckpointError naming the path, the system call and errno's text.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "mpitrain/checkpoint/file_hash.hpp"

namespace mpitrain::checkpoint {

// Flushes a file's data and metadata to the device (fsync).
void fsync_file(const std::filesystem::path& file);
// Flushes a directory's entries (the names created, renamed or removed in it).
void fsync_directory(const std::filesystem::path& dir);
// Creates `file` (which must not exist), writes `bytes` and fsyncs it.
void write_file_durably(const std::filesystem::path& file, std::string_view bytes);
// Writes a new file in pieces, then makes it durable, hashing the bytes on the way (XXH3-128,
// as hash_file() would read them back). Throws on any failure; a writer destroyed without
// finish() leaves the partial file for the caller to remove.
class DurableFileWriter {
 public:
  // Creates `file`, which must not exist.
  explicit DurableFileWriter(const std::filesystem::path& file);
  ~DurableFileWriter();
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;

  // Appends `bytes` (handles short writes and EINTR).
  void write(std::span<const unsigned char> bytes);
  // fsyncs and closes the file; returns its size and digest.
  FileDigest finish();

 private:
  struct Hasher;  // XXH3 streaming state
  std::filesystem::path path_;
  int fd_ = -1;
  std::unique_ptr<Hasher> hasher_;
  std::uint64_t bytes_ = 0;
};

// Returns the whole content of `file`; refuses files larger than max_bytes (a corrupted or
// hostile manifest must not make us allocate gigabytes).
std::string read_small_file(const std::filesystem::path& file, std::size_t max_bytes);
// Renames `from` to `to` with rename(2): atomic on one file system; `to` must not exist
// (a non-empty directory `to` makes rename fail, an empty one would be replaced, so this
// checks first).
void rename_path(const std::filesystem::path& from, const std::filesystem::path& to);
// Removes `path` recursively if it exists; returns an empty string on success, otherwise
// the reason (used on error paths, where a second exception must not hide the first).
std::string remove_all_noexcept(const std::filesystem::path& path) noexcept;

}  // namespace mpitrain::checkpoint
