// collective_bench --tune: rows reduced to selection rules (winners per size, mpi kept unless
// beaten by 3%, ranges merged and bounded geometrically, per-rank bytes for the gathers), and
// a real --tune run's table loaded back by AlgorithmSelection::load.

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "mpitrain/collectives/algorithm_selection.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "temp_dir.hpp"
#include "tune.hpp"

namespace mpitrain::bench {
namespace {

Row row(std::size_t size, const char* algo, double time_us, DType type = DType::f32) {
  Row r;
  r.type = type;
  r.size = size;
  r.algo = algo;
  r.time_us = time_us;
  return r;
}

TEST(TuneRules, WinnersPerSizeMergedIntoRanges) {
  const std::vector<Row> rows = {
      row(1024, "mpi", 10), row(1024, "shm", 9.9), row(1024, "default", 1),  // within 3%: mpi
      row(4096, "mpi", 20), row(4096, "shm", 10),                            // shm
      row(16384, "mpi", 40), row(16384, "shm", 20),                          // shm
      row(65536, "mpi", 50), row(65536, "shm", 80), row(65536, "ring", 45),  // ring
      row(65536, "mpi", 1, DType::bf16),                                     // another type
  };
  const auto rules = rules_from_rows(Collective::allreduce, DType::f32, rows, 2, 2, 1);
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].algorithm, "mpi");
  EXPECT_EQ(rules[0].min_bytes, 0u);
  EXPECT_EQ(rules[0].end_bytes, 2048u);  // sqrt(1024 * 4096)
  EXPECT_EQ(rules[1].algorithm, "shm");
  EXPECT_EQ(rules[1].min_bytes, 2048u);
  EXPECT_EQ(rules[1].end_bytes, 32768u);  // sqrt(16384 * 65536)
  EXPECT_EQ(rules[2].algorithm, "ring");
  EXPECT_EQ(rules[2].end_bytes, std::numeric_limits<std::size_t>::max());
  for (const SelectionRule& r : rules) {
    EXPECT_EQ(r.min_ranks, 2);
    EXPECT_EQ(r.max_ranks, 2);
    EXPECT_EQ(r.min_local_ranks, 2);
    EXPECT_EQ(r.max_nodes, 1);
    EXPECT_EQ(r.types, dtype_set({DType::f32}));
  }
  // reduce_scatter and allgather compare one rank's block: row sizes / ranks.
  const auto gather = rules_from_rows(Collective::allgather, DType::f32,
                                      {row(4096, "mpi", 20), row(8192, "shm", 1), row(8192, "mpi", 9)},
                                      4, 4, 1);
  ASSERT_EQ(gather.size(), 2u);
  EXPECT_EQ(gather[1].min_bytes, 1448u);  // sqrt(1024 * 2048)
}

TEST(TuneRules, TunedTableRoundTripsThroughAFile) {
  MpiRuntime runtime;
  const Communicator comm(runtime);
  // One file for the whole job, in a folder that rank 0 makes and removes.
  const test_support::SharedTempDir dir(comm, "tune_test");
  const std::string shared_path = (dir / "table.json").string();
  Options opt;
  opt.tune = shared_path;
  opt.dtype = "f32";
  opt.min_bytes = "1K";
  opt.max_bytes = "4K";
  opt.iters = 2;
  opt.warmup = 0;
  EXPECT_EQ(tune(comm, opt), 0);
  comm.barrier();
  const AlgorithmSelection loaded = AlgorithmSelection::load(shared_path);
  // Four collectives of one type, at least one rule each, then the built-in rules.
  EXPECT_GE(loaded.rules().size(), 4 + AlgorithmSelection::builtin().rules().size());
  EXPECT_EQ(loaded.rules().back().algorithm, AlgorithmSelection::builtin().rules().back().algorithm);
}

}  // namespace
}  // namespace mpitrain::bench
