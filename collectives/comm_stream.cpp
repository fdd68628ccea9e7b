// CommStream (see comm_stream.hpp). Cost: one mutex lock/unlock and one condition-variable
// notification per submitted task; the worker sleeps while the queue is empty.

#include "mpitrain/collectives/comm_stream.hpp"

#include <utility>

namespace mpitrain {

void CommFuture::wait() const {
  if (!future_.valid()) throw CommStreamError("CommFuture::wait: the future refers to no task");
  future_.get();
}

bool CommFuture::ready() const {
  return future_.valid() &&
         future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

CommStream::CommStream(const Communicator& comm)
    : comm_(comm), worker_([this] { run_worker(); }) {}

CommStream::~CommStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  if (worker_.joinable()) worker_.join();
}

CommFuture CommStream::submit(Task task) {
  if (!task) throw std::invalid_argument("CommStream::submit: empty task");
  Item item{std::move(task), {}};
  CommFuture future(item.done.get_future().share());
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw CommStreamError("CommStream::submit: the stream is shutting down");
    queue_.push_back(std::move(item));
  }
  work_cv_.notify_one();
  return future;
}

void CommStream::synchronize() {
  std::unique_lock lock(mutex_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !running_; });
  if (failure_) std::rethrow_exception(failure_);
}

std::size_t CommStream::cancel_pending() {
  std::deque<Item> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(queue_);
    finished_ += dropped.size();
  }
  for (Item& item : dropped) {
    item.done.set_exception(std::make_exception_ptr(
        CommStreamError("CommStream: task cancelled before it started (rank " +
                        std::to_string(comm_.rank()) + ")")));
  }
  idle_cv_.notify_all();
  return dropped.size();
}

std::uint64_t CommStream::tasks_finished() const {
  std::lock_guard lock(mutex_);
  return finished_;
}

std::size_t CommStream::tasks_in_flight() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + (running_ ? 1 : 0);
}

bool CommStream::failed() const {
  std::lock_guard lock(mutex_);
  return failure_ != nullptr;
}

std::string CommStream::failure_message() const {
  try {
    std::rethrow_exception(failure_);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

void CommStream::run_worker() noexcept {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    Item item = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    if (failure_) {
      // An earlier task failed: running this collective could mismatch the peers' order.
      const std::string reason = failure_message();
      lock.unlock();
      item.done.set_exception(std::make_exception_ptr(CommStreamError(
          "CommStream: task not run on rank " + std::to_string(comm_.rank()) +
          " because an earlier task failed: " + reason)));
    } else {
      lock.unlock();
      std::exception_ptr error;
      try {
        item.task(comm_);
      } catch (...) {
        error = std::current_exception();
      }
      if (error) {
        {
          std::lock_guard failure_lock(mutex_);
          if (!failure_) failure_ = error;
        }
        item.done.set_exception(error);
      } else {
        item.done.set_value();
      }
    }
    item.task = nullptr;  // release captured state before reporting idle
    lock.lock();
    running_ = false;
    ++finished_;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace mpitrain
