#include "mpitrain/engine/cores_of_this_thread.hpp"

#include <sched.h>

namespace mpitrain {

std::size_t cores_of_this_thread() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  // pid 0: the calling thread. A mask larger than cpu_set_t (more than 1024 CPUs) fails with
  // EINVAL: "does not say", and the caller keeps its default.
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return static_cast<std::size_t>(CPU_COUNT(&set));
}

}  // namespace mpitrain
