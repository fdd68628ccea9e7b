#include "mpitrain/checkpoint/durable_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "mpitrain/checkpoint/checkpoint_error.hpp"

namespace mpitrain::checkpoint {
namespace {

[[noreturn]] void fail_errno(std::string_view call, const std::filesystem::path& path, int err) {
  std::string msg(call);
  msg += " '" + path.string() + "' failed: " + std::strerror(err);
  throw CheckpointError(msg);
}

// Owns a POSIX file descriptor.
class Fd {
 public:
  Fd(const std::filesystem::path& path, int flags, mode_t mode = 0)
      : path_(path), fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)) {
    if (fd_ < 0) fail_errno("open", path, errno);
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  void fsync() const {
    if (::fsync(fd_) != 0) fail_errno("fsync", path_, errno);
  }
  // Closes and reports the error close(2) may return for delayed write-back (NFS).
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_errno("close", path_, errno);
  }

 private:
  std::filesystem::path path_;
  int fd_;
};

}  // namespace

void fsync_file(const std::filesystem::path& file) {
  Fd fd(file, O_RDONLY);
  fd.fsync();
  fd.close();
}

void fsync_directory(const std::filesystem::path& dir) {
  Fd fd(dir, O_RDONLY | O_DIRECTORY);
  fd.fsync();
  fd.close();
}

void write_file_durably(const std::filesystem::path& file, std::string_view bytes) {
  DurableFileWriter writer(file);
  writer.write({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()});
  writer.finish();
}

struct DurableFileWriter::Hasher {
  XXH3_state_t* state = XXH3_createState();
  ~Hasher() { XXH3_freeState(state); }
};

DurableFileWriter::DurableFileWriter(const std::filesystem::path& file)
    : path_(file),
      fd_(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)),
      hasher_(std::make_unique<Hasher>()) {
  if (fd_ < 0) fail_errno("open (create)", file, errno);
  if (hasher_->state == nullptr || XXH3_128bits_reset(hasher_->state) != XXH_OK) {
    throw CheckpointError("XXH3 state for '" + file.string() + "' could not be set up");
  }
}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFileWriter::write(std::span<const unsigned char> bytes) {
  if (fd_ < 0) throw CheckpointError("write '" + path_.string() + "' after finish()");
  if (XXH3_128bits_update(hasher_->state, bytes.data(), bytes.size()) != XXH_OK) {
    throw CheckpointError("XXH3 update failed while writing '" + path_.string() + "'");
  }
  bytes_ += bytes.size();
  const unsigned char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("write", path_, errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

FileDigest DurableFileWriter::finish() {
  if (fd_ < 0) throw CheckpointError("finish '" + path_.string() + "' twice");
  if (::fsync(fd_) != 0) fail_errno("fsync", path_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_errno("close", path_, errno);
  const XXH128_hash_t h = XXH3_128bits_digest(hasher_->state);
  return FileDigest{bytes_, xxh3_128_hex(h.high64, h.low64)};
}

std::string read_small_file(const std::filesystem::path& file, std::size_t max_bytes) {
  Fd fd(file, O_RDONLY);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail_errno("fstat", file, errno);
  if (!S_ISREG(st.st_mode)) throw CheckpointError("'" + file.string() + "' is not a regular file");
  if (static_cast<std::size_t>(st.st_size) > max_bytes) {
    throw CheckpointError("'" + file.string() + "' holds " + std::to_string(st.st_size) +
                          " bytes, more than the " + std::to_string(max_bytes) + " allowed");
  }
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno("read", file, errno);
    }
    if (n == 0) break;  // the file shrank under us: return what is there
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

void rename_path(const std::filesystem::path& from, const std::filesystem::path& to) {
  struct stat st {};
  if (::lstat(to.c_str(), &st) == 0) fail_errno("rename (target exists)", to, EEXIST);
  if (::rename(from.c_str(), to.c_str()) != 0) {
    fail_errno("rename to '" + to.string() + "' of", from, errno);
  }
}

std::string remove_all_noexcept(const std::filesystem::path& path) noexcept {
  try {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return "removing '" + path.string() + "' failed: " + ec.message();
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace mpitrain::checkpoint
