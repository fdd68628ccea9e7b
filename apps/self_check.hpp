#pragma once
// `trainer check`: a short self-test of the current launch, for the first minute of a job on
// a new cluster. Every collective the engine relies on runs with rank- and index-dependent
// inputs whose results are known in closed form (allreduce sum/avg/max in f32, bf16 and f16
// through every algorithm that can run on the launch's layout: shm, within one node only,
// is named as not run when the ranks span nodes; broadcast, allgather), then a small allreduce
// bandwidth table
// (1 KiB to 16 MiB, the engine's default algorithm beside plain MPI).
// Cost: about one second on two ranks of one node.

#include <cstdio>

#include "mpitrain/collectives/communicator.hpp"

namespace mpitrain::app {

// Returns the number of wrong results over all ranks (0: the launch works). Collective;
// rank 0 prints the report to `out`.
long long run_self_check(const Communicator& comm, std::FILE* out);

}  // namespace mpitrain::app
