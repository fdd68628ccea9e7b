// GroupBench: measures the rows of one group of collective_bench (every type and algorithm
// at one element count), interleaved, and checks them.

#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "descriptor.hpp"
#include "row.hpp"

namespace mpitrain::bench {

// Default run length per row (type and algorithm) of a group: the rows take turns until every
// mean is known to kTargetRelError (standard error of the mean over blocks, on every rank),
// after at least kMinSeconds and kMinIters, and at most kMaxSeconds or kMaxIters. On a quiet
// machine `--algo all` from 1K to 256M (19 sizes, 3 algorithms) takes well under a minute;
// under load each group takes longer, up to kMaxSeconds times its number of rows.
constexpr double kTargetRelError = 0.01;
constexpr double kMinSeconds = 0.25;
constexpr double kMaxSeconds = 2.5;
constexpr int kMinIters = 5;
constexpr int kMaxIters = 1000000;
constexpr int kProbeIters = 3;
// Warm-up iterations per row without --warmup.
constexpr int kDefaultWarmup = 2;
// Seconds between checks of the stopping rule (each check is one small allreduce), as
// estimated from the probe.
constexpr double kCheckSeconds = 0.05;
// Length of one interleaved block of iterations of one row: short, so that a burst of load on
// the (shared, 2-core) machine falls on every row alike.
constexpr double kBlockSeconds = 1e-4;

// Where a group's buffers live (Options::buffers, Options::in_place).
struct Placement {
  bool shared = false;    // in the node's shared segment (Communicator::allocate_shared)
  bool in_place = false;  // send inside recv, where the collective has an in-place form
};

class GroupBench {
 public:
  // algos: the algorithms of every row, "mpi" first (vs_mpi divides by its row).
  // shared_capacity: with placement.shared, the bytes of shared memory to allocate once for
  // every group of the run (bytes_needed of the largest); collective over the node.
  GroupBench(const Communicator& comm, const CollectiveDescriptor& collective,
             const std::vector<std::string>& algos, Placement placement,
             std::size_t shared_capacity);

  // Returns the bytes the buffers of a group of `count` elements of `types` take.
  static std::size_t bytes_needed(const CollectiveDescriptor& collective, std::size_t count,
                                  const std::vector<DType>& types, int nranks, bool in_place);

  // Returns the rows of one group: for each type of `types` (in that order), one row per
  // algorithm, for buffers of about `nominal_count` elements. Every row runs the same number
  // of iterations, the rows taking turns. iters and warmup: counts per row, or 0 / -1 to
  // size them from a timed probe. check: also count the wrong elements of each row.
  std::vector<Row> run(std::size_t nominal_count, const std::vector<DType>& types, int iters,
                       int warmup, bool check);

 private:
  // One row of a group: indices into buffers_ and algos_.
  struct Case {
    std::size_t buffers;
    std::size_t algo;
  };
  // Block times of one row: their sum, and what the standard error needs.
  struct BlockStats {
    double seconds = 0;
    double sum_sq = 0;  // of per-iteration times, one per block
    int blocks = 0;
    void add(double block_seconds, int iters);
    double rel_error(int iters_per_block) const;
  };
  // What the interleaved iterations measured, per case.
  struct Timings {
    std::vector<BlockStats> stats;
    std::vector<int> done;  // iterations run
  };

  void allocate_and_fill(std::size_t nominal_count, const std::vector<DType>& types);
  void execute(const Case& c) { runners_[c.algo](buffers_[c.buffers]); }
  double warm_up_and_probe(int warmup);
  Timings interleave(double probe, int block_iters_max, int iters);
  void rewrite_output(const Case& c);
  std::vector<Row> rows_of(const Timings& timings, bool check);
  std::uint64_t verify(const Case& c);
  static double seconds_since(std::chrono::steady_clock::time_point t0);

  const Communicator& comm_;
  const CollectiveDescriptor& collective_;
  std::vector<std::string> algos_;
  std::vector<Runner> runners_;  // per algorithm, as algos_
  Placement placement_;
  std::vector<std::byte> private_memory_;  // the current group's buffers (private)
  SharedBuffer shared_memory_;             // every group's buffers (shared), reused
  std::vector<Buffers> buffers_;  // per type of the current group
  std::vector<Case> cases_;       // the rows of the current group
};

}  // namespace mpitrain::bench
