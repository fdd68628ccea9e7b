#include "stop_signal.hpp"

#include <pthread.h>

#include <cerrno>
#include <ctime>
#include <system_error>

namespace mpitrain::app {

sigset_t stop_signals() noexcept {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

StopSignal::StopSignal() {
  const sigset_t set = stop_signals();
  if (const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0) {
    throw std::system_error(rc, std::generic_category(), "pthread_sigmask(SIG_BLOCK)");
  }
  watcher_ = std::thread([this, set] {
    // Wakes every 100 ms to notice destruction; a pending signal is taken at once.
    const timespec tick{0, 100'000'000};
    while (!quit_.load()) {
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig > 0) {
        int expected = 0;
        signal_.compare_exchange_strong(expected, sig);
      }
    }
  });
}

StopSignal::~StopSignal() {
  quit_.store(true);
  watcher_.join();
  // Unblocked, not the mask of before: the trainer blocks them before main (.preinit_array),
  // and a signal arriving once nobody watches must take its default action (end the
  // process), not stay pending for ever.
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

}  // namespace mpitrain::app
