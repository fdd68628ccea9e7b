#include "mpitrain/checkpoint/file_hash.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_error.hpp"

namespace mpitrain::checkpoint {
namespace {

std::string to_hex(XXH128_hash_t h) {
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

struct StateDelete {
  void operator()(XXH3_state_t* s) const noexcept { XXH3_freeState(s); }
};

}  // namespace

FileDigest hash_file(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw CheckpointError("open '" + file.string() + "' for hashing failed: " +
                          std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Advice only: a failure changes speed, not results.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  std::unique_ptr<XXH3_state_t, StateDelete> state(XXH3_createState());
  if (!state || XXH3_128bits_reset(state.get()) != XXH_OK) {
    throw CheckpointError("XXH3_128bits_reset failed while hashing '" + file.string() + "'");
  }
  constexpr std::size_t kBlockBytes = std::size_t{8} << 20;  // large reads: few syscalls
  std::vector<unsigned char> block(kBlockBytes);
  FileDigest digest;
  for (;;) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError("read '" + file.string() + "' for hashing failed: " +
                            std::strerror(errno));
    }
    if (n == 0) break;
    if (XXH3_128bits_update(state.get(), block.data(), static_cast<std::size_t>(n)) != XXH_OK) {
      throw CheckpointError("XXH3_128bits_update failed while hashing '" + file.string() + "'");
    }
    digest.bytes += static_cast<std::uint64_t>(n);
  }
  digest.xxh3_128 = to_hex(XXH3_128bits_digest(state.get()));
  return digest;
}

std::string xxh3_128_hex(std::span<const unsigned char> data) {
  return to_hex(XXH3_128bits(data.data(), data.size()));
}

std::string xxh3_128_hex(std::uint64_t high64, std::uint64_t low64) {
  XXH128_hash_t h;
  h.high64 = high64;
  h.low64 = low64;
  return to_hex(h);
}

}  // namespace mpitrain::checkpoint
