#pragma once
// cores_of_this_thread: how many CPUs the calling thread may run on, as the scheduler sees it
// (its affinity mask: an MPI launcher's binding, taskset, a cgroup's cpuset), which is what
// tells whether a second thread of this rank would run beside it or only take turns with it.
// std::thread::hardware_concurrency ignores the binding.

#include <cstddef>

namespace mpitrain {

// Returns the number of CPUs in the calling thread's affinity mask (sched_getaffinity), or 0
// when the system does not say.
std::size_t cores_of_this_thread() noexcept;

}  // namespace mpitrain
