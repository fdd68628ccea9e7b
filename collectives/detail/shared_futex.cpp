// futex_sleep and futex_wake_all (see shared_futex.hpp). Cost: one system call each; a wake
// with nobody asleep costs about a microsecond, which is why the waker asks first whether
// anyone sleeps.
#include "mpitrain/collectives/detail/shared_futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <system_error>

namespace mpitrain::detail {
namespace {

// The futex is the word's low half: on x86-64 (little-endian) its first four bytes.
std::uint32_t* low_half(const std::uint64_t* word) noexcept {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "futex on the low half of a word");
  return reinterpret_cast<std::uint32_t*>(const_cast<std::uint64_t*>(word));
}

long futex(std::uint32_t* address, int op, std::uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, address, op, value, timeout, nullptr, 0);
}

}  // namespace

bool futex_sleep(const std::uint64_t* word, std::uint64_t observed,
                 std::chrono::nanoseconds max_sleep) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(max_sleep);
  const timespec timeout{static_cast<time_t>(seconds.count()),
                         static_cast<long>((max_sleep - seconds).count())};
  // FUTEX_WAIT, not FUTEX_WAIT_PRIVATE: the sleepers and the waker are different processes.
  if (futex(low_half(word), FUTEX_WAIT, static_cast<std::uint32_t>(observed), &timeout) == 0) {
    return true;
  }
  switch (errno) {
    case EAGAIN:  // the word changed before we slept
    case EINTR:
      return true;
    case ETIMEDOUT:
      return false;
    default:
      throw std::system_error(errno, std::generic_category(), "futex(FUTEX_WAIT)");
  }
}

void futex_wake_all(const std::uint64_t* word) {
  if (futex(low_half(word), FUTEX_WAKE, INT_MAX, nullptr) < 0) {
    throw std::system_error(errno, std::generic_category(), "futex(FUTEX_WAKE)");
  }
}

}  // namespace mpitrain::detail
