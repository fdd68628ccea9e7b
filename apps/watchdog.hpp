#pragma once
// Watchdog: ends a job that stopped making progress, with a message that names the rank and
// what it was doing, instead of letting it hang until the scheduler's time limit.
//
// The training loop calls progress("training step 120") at every phase; a watcher thread
// wakes every second, and when the current phase has lasted more than `timeout_s` it calls
// `on_timeout` with a message such as "rank 1: no progress for 600 s (in: training step 120)".
// The trainer passes a function that prints it and aborts the MPI job (MPI_Abort ends every
// rank, also those blocked inside a collective waiting for a rank that never comes).
//
// Blame: a rank that waits inside a collective is not the one that stopped making progress;
// its collective's own deadline (Communicator::set_timeout, the same timeout_s) reports the
// rank that did not arrive. So while `waiting_for_peers()` returns true the watchdog does not
// fire; it fires on the rank that is stuck elsewhere (computing, in I/O, stopped in a loop),
// and that message names the right rank.
// Cost: one relaxed atomic store per progress() call; one wake-up per second.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace mpitrain::app {

class Watchdog {
 public:
  // timeout_s <= 0 disables the watchdog (no thread is started). `waiting_for_peers`
  // (Communicator::waiting_for_peers; empty: never) returns true while this rank waits in a
  // collective that has a deadline.
  Watchdog(double timeout_s, int rank, std::function<void(const std::string&)> on_timeout,
           std::function<bool()> waiting_for_peers = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts a new phase now; `what` must be a string literal or otherwise outlive the phase
  // (it is read by the watcher thread). `detail` (a step number) is added to the message.
  void progress(const char* what, long long detail = -1) noexcept;

 private:
  void watch();

  double timeout_s_;
  int rank_;
  std::function<void(const std::string&)> on_timeout_;
  std::function<bool()> waiting_for_peers_;
  std::atomic<const char*> what_{"starting"};
  std::atomic<long long> detail_{-1};
  std::atomic<std::int64_t> since_ns_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace mpitrain::app
