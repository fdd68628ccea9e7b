// collective_bench: bandwidth of the Communicator's collectives, nccl-tests style
// (output contract: DESIGN.md section 8).
//
//   mpirun -np N collective_bench [--op allreduce|reduce_scatter|allgather|broadcast]
//       [--dtype f32|f64|bf16|f16[,...]] [--algo NAME|all] [--min-bytes 1K]
//       [--max-bytes 256M] [--iters N] [--warmup N] [--check] [--json FILE] [--tune FILE]
//
// Built as one driver (driver.cpp: the size sweep and the table; group_bench.cpp: warm-up,
// interleaved timed iterations, maximum over ranks, --check; report.cpp: what is printed and
// written) and one descriptor per collective (allreduce_descriptor.cpp, ...: buffers, fill,
// closed-form check, bus-bandwidth factor, algorithms), listed in collective_table.cpp.
//
// Within a group of rows (one element count) every row runs the same number of iterations,
// and the rows take turns in blocks of about 100 us, each row following every other one
// equally often (mpi default mpi ring default ring, ...), so that the noise of a shared
// machine, and what one row leaves in the caches for the next, hit them alike. Without --iters
// the run goes on until every mean is known to 1% (standard error over the blocks), between
// 0.25 and 2.5 s per row. Time per iteration is the mean over the iterations, maximum over
// ranks; algbw = size / time; busbw = algbw * factor (allreduce 2(n-1)/n, reduce_scatter and
// allgather (n-1)/n, broadcast 1).
//
// With several types and f32 among them, a footer "# time vs f32 (same element count)"
// gives, per element count, each 16-bit type's time over f32's time, both for the default
// algorithm (mpi when --algo leaves default out): the ratios of one group, measured side by
// side.
//
// Exit codes: 0 done; 1 --check found wrong values, or a runtime error; 2 bad options (on every
// rank, before any collective, so nothing hangs).

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "collective_table.hpp"
#include "driver.hpp"
#include "tune.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace {

// Declares the command line of DESIGN.md section 8 on `app`, writing into `opt`.
void add_options(CLI::App& app, mpitrain::bench::Options& opt) {
  using namespace mpitrain::bench;
  app.add_option("--op", opt.op, collective_names(" | "));
  app.add_option("--dtype", opt.dtype,
                 "f32 | f64 | bf16 | f16, or a comma-separated list (f32,bf16) measured "
                 "side by side");
  app.add_option("--algo", opt.algo,
                 "algorithm name (" + algorithm_names_by_collective() + ") or all");
  app.add_option("--min-bytes", opt.min_bytes, "smallest payload, e.g. 1K");
  app.add_option("--max-bytes", opt.max_bytes, "largest payload, e.g. 256M");
  app.add_option("--iters", opt.iters,
                 "iterations per size and algorithm (default: until the means are known to 1%)");
  app.add_option("--warmup", opt.warmup, "warm-up iterations per row (default: 2)");
  app.add_flag("--check", opt.check, "verify results against closed-form values");
  app.add_option("--buffers", opt.buffers,
                 "private (ordinary memory, the default) | shared (the node's shared segment, "
                 "as the engine's gradient buckets)");
  app.add_flag("--in-place", opt.in_place,
               "send is recv (allreduce) or this rank's block of it (allgather), as the "
               "engine's buckets");
  app.add_option("--json", opt.json, "also write the rows as JSON to FILE");
  app.add_option("--tune", opt.tune,
                 "measure every collective and algorithm, write the fastest per size to FILE "
                 "(an algorithm table for MPITRAIN_ALGORITHM_TABLE or distributed.algorithm_table)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mpitrain;
  std::optional<MpiRuntime> runtime;
  try {
    runtime.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: %s\n", e.what());
    return 1;
  }
  Communicator comm(*runtime);
  const bool rank0 = comm.rank() == 0;

  bench::Options opt;
  CLI::App app{"collective_bench: bandwidth of mpitrain's collectives (nccl-tests columns)"};
  add_options(app, opt);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank ends here; only rank 0 talks.
    if (rank0) app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }

  try {
    return opt.tune.empty() ? bench::run(comm, opt) : bench::tune(comm, opt);
  } catch (const bench::UsageError& e) {
    if (rank0) std::fprintf(stderr, "collective_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: error on rank %d: %s\n", comm.rank(), e.what());
    comm.abort(1);
  }
}
