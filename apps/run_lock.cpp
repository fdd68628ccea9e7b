#include "run_lock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <sstream>
#include <system_error>

namespace mpitrain::app {
namespace {

[[noreturn]] void fail(const std::string& call, const std::filesystem::path& file) {
  throw std::system_error(errno, std::generic_category(), fmt::format("{} '{}'", call, file.string()));
}

// Returns the whole content of the open file `fd` (a few dozen bytes).
std::string read_all(int fd) {
  std::string text;
  char buffer[256];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, at);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    at += n;
  }
  return text;
}

// Returns "pid P\nhost H\nsince T\n" for this process, now.
std::string holder_text() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '?';
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char since[32] = {};
  std::strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return fmt::format("pid {}\nhost {}\nsince {}\n", ::getpid(), host, since);
}

}  // namespace

std::string describe_lock_holder(const std::string& content) {
  std::string pid, host = "?", since = "?";
  std::istringstream lines(content);
  for (std::string key, value; lines >> key && std::getline(lines >> std::ws, value);) {
    if (key == "pid") pid = value;
    if (key == "host") host = value;
    if (key == "since") since = value;
  }
  if (pid.empty()) return "an unknown process";
  return fmt::format("pid {} on {} since {}", pid, host, since);
}

std::optional<RunLock> RunLock::try_acquire(const std::filesystem::path& dir, std::string& holder) {
  const std::filesystem::path file = dir / kRunLockFile;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("open (create)", file);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    holder = describe_lock_holder(read_all(fd));
    ::close(fd);
    if (error == EWOULDBLOCK) return std::nullopt;
    errno = error;
    fail("flock", file);
  }
  RunLock lock(fd, file);
  const std::string text = holder_text();
  if (::ftruncate(fd, 0) != 0) fail("ftruncate", file);
  if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) fail("write", file);
  return lock;
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_), file_(std::move(other.file_)) { other.fd_ = -1; }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    file_ = std::move(other.file_);
    other.fd_ = -1;
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace mpitrain::app
