#pragma once
// StopSignal: turns SIGTERM and SIGUSR1 (what Slurm and other schedulers send before
// preemption or at the end of a time limit) into a flag the training loop polls.
//
// Construct it first in main(), before MPI starts its own threads: it blocks the two signals
// in the calling thread, every thread created afterwards inherits that mask, and a watcher
// thread takes them with sigtimedwait. So no signal handler runs and no global is touched.
// Destruction unblocks them, so that a late signal ends the process. Threads that libraries start while they load,
// before main (OpenBLAS's), do not inherit it: the trainer blocks the signals earlier still,
// from its .preinit_array (apps/trainer.cpp).

#include <atomic>
#include <csignal>
#include <thread>

namespace mpitrain::app {

// Returns the set {SIGTERM, SIGUSR1}.
sigset_t stop_signals() noexcept;

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Returns true once SIGTERM or SIGUSR1 has arrived.
  bool requested() const noexcept { return signal_.load() != 0; }
  // Returns the number of the signal that arrived first (0: none).
  int signal_number() const noexcept { return signal_.load(); }

 private:
  std::atomic<int> signal_{0};
  std::atomic<bool> quit_{false};
  std::thread watcher_;
};

}  // namespace mpitrain::app
