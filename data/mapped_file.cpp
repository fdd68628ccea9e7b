// MappedFile (see mapped_file.hpp): open, fstat, mmap, close; munmap at the end.

#include "mpitrain/data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace mpitrain::data {
namespace {

std::runtime_error map_error(const std::filesystem::path& path, const char* call, int error) {
  return std::runtime_error("cannot map '" + path.string() + "': " + call + ": " +
                            std::strerror(error));
}

// Closes a descriptor when it ends: the mapping outlives it.
class Descriptor {
 public:
  explicit Descriptor(int fd) noexcept : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) {
  const Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw map_error(path, "open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw map_error(path, "fstat", errno);
  if (!S_ISREG(st.st_mode)) {
    throw std::runtime_error("cannot map '" + path.string() + "': not a regular file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) return;  // mmap refuses length 0
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (address == MAP_FAILED) throw map_error(path, "mmap", errno);
  address_ = static_cast<const std::byte*>(address);
  size_ = size;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    address_ = std::exchange(other.address_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() noexcept {
  // munmap fails only for an address range that was never mapped.
  if (address_ != nullptr) ::munmap(const_cast<std::byte*>(address_), size_);
  address_ = nullptr;
  size_ = 0;
}

}  // namespace mpitrain::data
