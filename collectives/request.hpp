#pragma once
// Request: a nonblocking collective in flight (Communicator::iallreduce and friends).

#include <memory>

namespace mpitrain {

class Request {
 public:
  struct State;  // collectives/detail/request_state.hpp: MPI requests, buffers, finishers

  Request() noexcept;  // an empty request: already complete
  // For collectives/ algorithms: a request that completes when `state` does.
  explicit Request(std::unique_ptr<State> state) noexcept;
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  // Waits for an unfinished collective (a failure is dropped: call wait() to see it).
  ~Request();

  // Returns once the collective has completed; throws MpiError if it failed. When the
  // communicator has a timeout, a wait past it reports the ranks that did not arrive and ends
  // the job, or throws CollectiveTimeout (collective_timeout.hpp).
  void wait();
  // Returns true when the collective has completed (and finishes any post-processing).
  bool test();

  // For collectives/: the state of an unfinished collective (nullptr when there is none).
  State* state() const noexcept { return state_.get(); }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace mpitrain
