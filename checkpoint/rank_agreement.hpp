#pragma once
// Agreement of all ranks on the outcome of a step of the commit protocol: a failure on any
// rank becomes the same CheckpointError on every rank, with every failing rank's message.
// Cost: one allgather of one int64 when every rank succeeded; on failure, one more
// allgatherv of the messages (each cut to 2000 bytes).

#include <optional>
#include <string>
#include <string_view>

#include "mpitrain/collectives/communicator.hpp"

namespace mpitrain::checkpoint {

// Returns normally when no rank passes an error; otherwise throws CheckpointError on every
// rank: "<what> failed on rank(s) 0, 2: [rank 0] <message>; [rank 2] <message>".
// Collective.
void agree_on_success(const Communicator& comm, const std::optional<std::string>& error,
                      std::string_view what);

// Returns `text` of rank `root` on every rank. Collective.
std::string broadcast_string(const Communicator& comm, const std::string& text, int root);

// Returns the message of the exception `f` throws, or nothing when it returns.
template <class F>
std::optional<std::string> capture_error(F&& f) noexcept {
  try {
    f();
    return std::nullopt;
  } catch (const std::exception& e) {
    return std::string(e.what());
  } catch (...) {
    return std::string("unknown exception");
  }
}

}  // namespace mpitrain::checkpoint
