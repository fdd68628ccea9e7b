#pragma once
// FuzzInputFile: fuzzer bytes presented as a file path, for readers that take a path (the
// IDX reader, the config loader, the safetensors reader). The bytes live in an anonymous
// in-memory file (memfd_create) reached through /proc/self/fd/N: no disk traffic per input,
// and each open of the path reads from offset 0. The descriptor is closed on destruction.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mpitrain::fuzz {

class FuzzInputFile {
 public:
  FuzzInputFile(const std::uint8_t* data, std::size_t size_bytes)
      : fd_(memfd_create("fuzz_input", 0)) {
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
    std::size_t written = 0;
    while (written < size_bytes) {
      const ssize_t n = ::write(fd_, data + written, size_bytes - written);
      if (n <= 0) {
        ::close(fd_);
        throw std::runtime_error("write to memfd failed");
      }
      written += static_cast<std::size_t>(n);
    }
  }
  FuzzInputFile(const FuzzInputFile&) = delete;
  FuzzInputFile& operator=(const FuzzInputFile&) = delete;
  ~FuzzInputFile() { ::close(fd_); }

  // Returns a path that opens the bytes as a regular file.
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace mpitrain::fuzz
