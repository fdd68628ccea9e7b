#pragma once
// CommStream: the communication stream of DESIGN.md section 2.
//
// One worker thread per communicator runs queued collective tasks one at a time, in the order
// they were submitted, so every rank issues its collectives in the same order however the
// main thread interleaves compute and submissions. Open MPI progresses a collective only while
// some thread is inside MPI; the worker is that thread, so gradient reductions advance while
// the main thread computes the rest of backward.
//
// The worker sleeps on a condition variable when the queue is empty (no spinning when idle).
// A task that throws fails its own future with its exception; because a rank that skipped a
// collective would leave its peers waiting or mismatch later collectives, every task after a
// failure is not run: its future fails with CommStreamError naming the first failure, and
// synchronize() rethrows the first failure. Destroying the stream runs the tasks still queued
// (peers expect those collectives) and joins the worker; cancel_pending() drops them instead.
//
// Cost: one mutex lock and one condition-variable notification per submit (a few
// microseconds when the worker was asleep), nothing while idle.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "mpitrain/collectives/communicator.hpp"

namespace mpitrain {

// Raised for a task the stream did not run (cancelled, or after an earlier task failed).
class CommStreamError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The completion of one submitted task.
class CommFuture {
 public:
  CommFuture() = default;
  explicit CommFuture(std::shared_future<void> future) : future_(std::move(future)) {}

  // Returns once the task has finished; rethrows its exception (on every call).
  void wait() const;
  // Returns true when the task has finished, successfully or not.
  bool ready() const;
  // Returns true when this future refers to a task.
  bool valid() const noexcept { return future_.valid(); }

 private:
  std::shared_future<void> future_;
};

class CommStream {
 public:
  using Task = std::function<void(const Communicator&)>;

  // Starts the worker thread; `comm` must outlive the stream.
  explicit CommStream(const Communicator& comm);
  // Runs the tasks still queued, then joins the worker.
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;
  CommStream(CommStream&&) = delete;
  CommStream& operator=(CommStream&&) = delete;

  // Returns the future of `task`, queued behind every earlier task.
  CommFuture submit(Task task);
  // Returns once every submitted task has finished; rethrows the first task failure, if any
  // (the failure stays: later calls rethrow it again).
  void synchronize();
  // Drops the tasks not started yet; their futures fail with CommStreamError. Returns how many.
  std::size_t cancel_pending();

  // Returns the number of tasks that finished (run, failed or not run).
  std::uint64_t tasks_finished() const;
  // Returns the number of tasks submitted and not finished (queued or running).
  std::size_t tasks_in_flight() const;
  // Returns true when a task has failed (see the class comment).
  bool failed() const;
  const Communicator& communicator() const noexcept { return comm_; }

 private:
  struct Item {
    Task task;
    std::promise<void> done;
  };
  void run_worker() noexcept;
  std::string failure_message() const;  // requires mutex_ held and failure_ set

  const Communicator& comm_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // queue non-empty or stopping
  std::condition_variable idle_cv_;  // a task finished
  std::deque<Item> queue_;
  bool running_ = false;  // the worker is executing a task
  bool stopping_ = false;
  std::uint64_t finished_ = 0;
  std::exception_ptr failure_;
  std::thread worker_;  // last member: starts after the others are constructed
};

}  // namespace mpitrain
