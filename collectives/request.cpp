// Request: completion of a nonblocking collective through MPI_Waitall / MPI_Testall, then its
// finishers (divisions of averages, conversions of staged 16-bit results).

#include "mpitrain/collectives/request.hpp"

#include <mpi.h>

#include <utility>

#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/detail/bounded_wait.hpp"
#include "mpitrain/collectives/detail/request_state.hpp"

namespace mpitrain {

void Request::State::complete() {
  done = true;
  for (const auto& finish : finishers) finish();
}

Request::Request() noexcept = default;
Request::Request(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}
Request::Request(Request&&) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->done) {
      try {
        wait();
      } catch (...) {  // noexcept move: a failure here has no caller to reach
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Request::~Request() {
  if (state_ && !state_->done) {
    try {
      wait();
    } catch (...) {  // a destructor must not throw; call wait() to see the error
    }
  }
}

void Request::wait() {
  if (!state_ || state_->done) return;
  if (!state_->reqs.empty()) {
    int rc = MPI_SUCCESS;
    try {
      rc = detail::wait_requests(state_->reqs.data(), static_cast<int>(state_->reqs.size()),
                                 state_->timeout);
    } catch (const detail::WaitExpired& e) {
      state_->done = true;  // abandoned: neither the destructor nor a retry may wait for it
      if (state_->on_expired) state_->on_expired(e.waited());
      throw;
    }
    if (rc != MPI_SUCCESS) {
      state_->done = true;
      throw MpiError("MPI_Waitall (" + state_->call + ")", state_->rank, state_->count, rc, {});
    }
  }
  state_->complete();
}

bool Request::test() {
  if (!state_ || state_->done) return true;
  if (!state_->reqs.empty()) {
    int flag = 0;
    const int rc = MPI_Testall(static_cast<int>(state_->reqs.size()), state_->reqs.data(), &flag,
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      state_->done = true;
      throw MpiError("MPI_Testall (" + state_->call + ")", state_->rank, state_->count, rc, {});
    }
    if (!flag) return false;
  }
  state_->complete();
  return true;
}

}  // namespace mpitrain
