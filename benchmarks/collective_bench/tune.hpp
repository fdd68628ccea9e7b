// collective_bench --tune FILE: measures every algorithm of every collective on this launch
// and writes the fastest per size as an algorithm table (AlgorithmSelection JSON) that the
// engine and the trainer load (MPITRAIN_ALGORITHM_TABLE, distributed.algorithm_table).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpitrain/collectives/algorithm_selection.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "options.hpp"
#include "row.hpp"

namespace mpitrain::bench {

// Returns the rules that pick, per size, the fastest of `rows` (one collective `op`, one type,
// several algorithms; "default" rows are ignored), for this launch's layout (ranks, ranks per
// node, nodes). An algorithm replaces mpi only when it is at least 3% faster; consecutive
// sizes with one winner become one range, bounded halfway (geometrically) between the last
// size of one winner and the first of the next; the first range starts at 0 bytes and the
// last has no end. Bytes are one rank's contribution as sent (reduce_scatter: the block each
// rank receives; allgather: the block each rank sends), as the Communicator's selection sees
// them.
std::vector<SelectionRule> rules_from_rows(Collective op, DType type, const std::vector<Row>& rows,
                                           int ranks, int local_ranks, int nodes);

// Returns the exit code of --tune: measures allreduce, reduce_scatter, allgather and broadcast
// for f32, bf16 and f16 (or --dtype) between --min-bytes and --max-bytes with every algorithm,
// prints each table, and writes the tuned rules followed by the built-in ones (for other
// layouts) to opt.tune on rank 0.
int tune(const Communicator& comm, Options opt);

}  // namespace mpitrain::bench
