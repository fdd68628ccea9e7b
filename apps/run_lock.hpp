#pragma once
// RunLock: one run at a time per project folder (DESIGN.md section 5, "checkpoint folder
// rules"). The trainer's rank 0 takes an exclusive flock(2) on <project.dir>/.mpitrain.lock
// before anything in the folder is touched, writes "pid P\nhost H\nsince T\n" into it (T in
// UTC, ISO 8601), and holds it to the end of the run. The kernel releases the lock when the
// process ends, however it ends, so a crashed run never leaves a stale lock: the file may
// remain, with the last holder's text, but only the flock counts. The file is never
// unlinked (a second run could otherwise lock a fresh file while the first still holds the
// old one). Local, no MPI.

#include <filesystem>
#include <optional>
#include <string>

namespace mpitrain::app {

inline constexpr const char* kRunLockFile = ".mpitrain.lock";

class RunLock {
 public:
  // Returns the lock of `dir`, or nothing when another process holds it; `holder` then
  // receives the holder's text as one line ("pid P on H since T"), or "an unknown process"
  // when the file is still empty. Throws std::system_error naming the file when it cannot
  // be opened or locked.
  static std::optional<RunLock> try_acquire(const std::filesystem::path& dir, std::string& holder);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  RunLock(int fd, std::filesystem::path file) : fd_(fd), file_(std::move(file)) {}
  int fd_ = -1;
  std::filesystem::path file_;
};

// Returns the text "pid P on H since T" of a lock file's content, or "an unknown process"
// when it holds no pid line.
std::string describe_lock_holder(const std::string& content);

}  // namespace mpitrain::app
