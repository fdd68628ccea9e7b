#include "mpitrain/engine/thread_level_requirement.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace mpitrain {

ThreadLevel required_thread_level(const EngineConfig& config) noexcept {
  return config.overlap ? ThreadLevel::serialized : ThreadLevel::funneled;
}

void check_thread_level(const EngineConfig& config, ThreadLevel provided, int rank) {
  const ThreadLevel required = required_thread_level(config);
  if (static_cast<int>(provided) >= static_cast<int>(required)) return;
  if (config.overlap) {
    throw std::invalid_argument(fmt::format(
        "Engine (rank {}): overlap on (bucket reductions on the communication thread) needs {}, "
        "but MPI provides {}: initialise MPI at {} or higher (MpiRuntime's default is "
        "MPI_THREAD_MULTIPLE), or turn overlap off (distributed.overlap: false), which needs {}",
        rank, to_string(required), to_string(provided), to_string(required),
        to_string(ThreadLevel::funneled)));
  }
  throw std::invalid_argument(fmt::format(
      "Engine (rank {}): overlap off (synchronous bucket reduction on the calling thread) "
      "needs {}, but MPI provides {}: initialise MPI at {} or higher",
      rank, to_string(required), to_string(provided), to_string(required)));
}

}  // namespace mpitrain
