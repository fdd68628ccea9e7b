#pragma once
// Temporary folders for tests: fresh and empty when made, removed with everything in them
// when the test leaves its scope, also when it fails an assertion or throws.

#include <filesystem>
#include <string>
#include <string_view>

#include "mpitrain/collectives/communicator.hpp"

namespace mpitrain::test_support {

// A fresh empty folder under the system's temporary folder, named after `tag`, the process
// id and 64 random bits (so concurrent tests and reruns never share one); removed
// (recursively) on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  // Returns path() / name.
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  // Returns path() / name as a string, for APIs that take one.
  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The same fresh folder on every rank of `comm` (rank 0 makes it and broadcasts its name);
// on destruction every rank meets in a barrier, then rank 0 removes it.
class SharedTempDir {
 public:
  SharedTempDir(const Communicator& comm, std::string_view tag);
  ~SharedTempDir();
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  // Returns path() / name.
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  const Communicator& comm_;
  std::filesystem::path path_;
};

}  // namespace mpitrain::test_support
