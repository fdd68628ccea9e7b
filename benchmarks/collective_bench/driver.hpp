// The driver of collective_bench: one run of one collective (its descriptor) over the size
// sweep, for every --dtype and --algo, printed as the table of DESIGN.md section 8.

#pragma once

#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "options.hpp"
#include "row.hpp"

namespace mpitrain::bench {

// Returns the exit code of a run: 0 done, 1 when --check found wrong values. Throws
// UsageError for bad options (on every rank, before any collective but the one that agrees
// whether the --json file opened), std::exception for runtime errors.
int run(const Communicator& comm, const Options& opt);

// Returns the rows of one collective's table (printed on rank 0 as they are measured, with
// the header, without footers): what run() measures, for --tune.
std::vector<Row> run_rows(const Communicator& comm, const Options& opt);

}  // namespace mpitrain::bench
