// A small program using only mpitrain's public headers, desynchronised on purpose;
// deadline_test.py runs it under mpiexec and checks what ends the job and the message.
//
//   deadline_program MODE TIMEOUT_S
//
// Every mode runs allreduces of 1024 fp32 values (collectives #1, #2, ...; latency's #5 is
// a barrier) with Communicator::set_timeout(TIMEOUT_S):
//   stop         rank 1 stops itself (SIGSTOP) before #5: the others time out in #5
//   skip         rank 1 skips #5 (it issues 9 of 10): the others time out in #10
//   fingerprint  Communicator::check_collectives() after each allreduce; rank 1 reduces #5
//                with max instead of sum, which MPI completes without a word (each rank
//                combines with its own op): the check after #5 throws CollectiveMismatch on
//                every rank
//   debug        the debug mode (MPITRAIN_DEBUG_COLLECTIVES=1 from the caller): 56
//                allreduces, then #57 is a barrier named wait_for_everyone on rank 0 and an
//                allreduce named Engine::backward elsewhere: CollectiveMismatch on every rank
//   throw        stop, with TimeoutAction::throw_error: rank 0 catches CollectiveTimeout,
//                prints it and ends the job with Communicator::abort(3)
//   latency      #5 is Communicator::core_latency_ns() on every rank but 1, which issues the
//                barrier that call begins with and then stops: rank 0 times out in the
//                measurement itself, waiting for its probe partner; the others (3 ranks) in
//                the allreduce that ends the call (#6)
//   truncate     rank 0 passes 512 values to #5 (MPI's algorithm), the others 1024: MPI
//                fails rank 0's call with MPI_ERR_TRUNCATE, which must reach it as MpiError
//                although the timeout makes the call wait on a nonblocking request (Open MPI
//                reports those through MPI_COMM_WORLD's handler); rank 0 prints it and ends
//                the job with Communicator::abort(3)
// A CollectiveMismatch, CollectiveTimeout or MpiError is printed as "rank R caught: WHAT" and
// the program exits 3; finishing every collective exits 0 ("rank R: done").

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

using namespace mpitrain;

namespace {

void allreduce(const Communicator& comm, std::vector<float>& data, ReduceOp op = ReduceOp::sum) {
  comm.allreduce(std::span<float>(data), op);
}

// Runs the collectives of `mode` (see the top of the file).
void run(const std::string& mode, const Communicator& comm) {
  std::vector<float> data(1024, 1.0f);
  const bool odd_rank = comm.rank() == 1;
  if (mode == "debug") {
    for (int i = 1; i <= 56; ++i) allreduce(comm, data);
    if (comm.rank() == 0) {
      const Communicator::CallSite site(comm, "wait_for_everyone");
      comm.barrier();
    } else {
      const Communicator::CallSite site(comm, "Engine::backward");
      allreduce(comm, data);
    }
    return;
  }
  for (int i = 1; i <= 10; ++i) {
    if (odd_rank && i == 5 && (mode == "stop" || mode == "throw")) raise(SIGSTOP);
    const bool odd_call = odd_rank && i == 5;
    if (mode == "latency" && i == 5) {
      if (odd_rank) {
        comm.barrier();  // as core_latency_ns begins: rank 0 passes it, then probes in vain
        raise(SIGSTOP);
      } else {
        comm.core_latency_ns();
      }
    } else if (mode == "truncate" && i == 5) {
      const std::size_t count = comm.rank() == 0 ? data.size() / 2 : data.size();
      comm.allreduce(data.data(), data.data(), count, DType::f32, ReduceOp::sum, "mpi");
    } else if (mode == "fingerprint") {
      allreduce(comm, data, odd_call ? ReduceOp::max : ReduceOp::sum);
      comm.check_collectives();
    } else if (!(odd_call && mode == "skip")) {
      allreduce(comm, data);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: deadline_program stop|skip|fingerprint|debug|throw|latency|truncate "
                 "TIMEOUT_S\n");
    return 2;
  }
  const std::string mode = argv[1];
  MpiRuntime runtime(&argc, &argv);
  Communicator comm(runtime);
  comm.set_timeout(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(std::atof(argv[2]))));
  if (mode == "throw") comm.set_timeout_action(TimeoutAction::throw_error);
  try {
    run(mode, comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d caught: %s\n", comm.rank(), e.what());
    std::fflush(stderr);
    // MPI_Finalize would wait for the stopped rank, or for the peers still in #5.
    if (mode == "throw" || mode == "truncate") comm.abort(3);
    return 3;
  }
  std::printf("rank %d: done\n", comm.rank());
  return 0;
}
