#pragma once
// BLAS threads: how many threads OpenBLAS uses for each GEMM, and a sensible default when
// several ranks share a node (each rank gets an equal share of the cores, so ranks do not
// oversubscribe the node). nn knows no MPI: the number of ranks on the node is passed in.

#include <cstddef>
#include <string>

namespace mpitrain::nn {

// Sets the number of OpenBLAS threads (values below 1 are treated as 1). Process-wide, as
// OpenBLAS keeps one thread pool per process.
void set_blas_threads(std::size_t threads) noexcept;
// Returns the number of threads OpenBLAS uses now.
std::size_t blas_threads() noexcept;
// Returns max(1, cores_on_node / ranks_on_node); ranks_on_node 0 counts as 1.
std::size_t default_blas_threads(std::size_t cores_on_node, std::size_t ranks_on_node) noexcept;
// Same with cores_on_node = the hardware threads of this machine
// (std::thread::hardware_concurrency, which ignores an MPI binding of this process).
std::size_t default_blas_threads(std::size_t ranks_on_node) noexcept;
// Returns the BLAS library's own description: OpenBLAS's build configuration and the CPU
// kernel it chose ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64; core Haswell").
std::string blas_library_info();

}  // namespace mpitrain::nn
