#pragma once
// `trainer env`: what a bug report needs about the launch: versions of mpitrain, MPI, HDF5,
// BLAS and the compiler; ranks, nodes and threads; the CPU kernels chosen.

#include <cstdio>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain::app {

// Rank 0 prints the report to `out`. Collective (it gathers every rank's host name).
void print_env(const MpiRuntime& runtime, const Communicator& comm, std::FILE* out);

}  // namespace mpitrain::app
