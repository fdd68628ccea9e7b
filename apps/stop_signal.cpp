#include "stop_signal.hpp"

#include <pthread.h>

#include <cerrno>
#include <ctime>
#include <system_error>

namespace mpitrain::app {
namespace {

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

}  // namespace

StopSignal::StopSignal() {
  const sigset_t set = stop_signals();
  if (const int rc = pthread_sigmask(SIG_BLOCK, &set, &previous_mask_); rc != 0) {
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
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

}  // namespace mpitrain::app
