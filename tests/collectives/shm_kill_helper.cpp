// Runs shared-memory allreduces until killed; prints "ready <node rank> <pid>" once its
// segment exists and a first collective went through. shm_kill_test.sh SIGKILLs one rank in
// the middle of the loop and checks that nothing is left in /dev/shm.

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "mpitrain/collectives/detail/shm_collectives.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  mpitrain::detail::ShmSegment seg(node);
  std::vector<float> data(1 << 20, 1.0f);
  const mpitrain::SharedBuffer buffer = seg.allocate(data.size() * sizeof(float));
  const std::span<std::byte> arena = buffer.bytes();
  mpitrain::detail::shm_allreduce(seg, data.data(), data.data(), data.size(),
                                  mpitrain::DType::f32, mpitrain::ReduceOp::max);
  std::printf("ready %d %d\n", seg.rank(), static_cast<int>(getpid()));
  std::fflush(stdout);
  for (;;) {
    mpitrain::detail::shm_allreduce(seg, data.data(), data.data(), data.size(),
                                    mpitrain::DType::f32, mpitrain::ReduceOp::max);
    mpitrain::detail::shm_allreduce(seg, arena.data(), arena.data(), data.size(),
                                    mpitrain::DType::f32, mpitrain::ReduceOp::sum);
  }
}
