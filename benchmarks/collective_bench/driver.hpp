// The driver of collective_bench: one run of one collective (its descriptor) over the size
// sweep, for every --dtype and --algo, printed as the table of DESIGN.md section 8.

#pragma once

#include "mpitrain/collectives/communicator.hpp"
#include "options.hpp"

namespace mpitrain::bench {

// Returns the exit code of a run: 0 done, 1 when --check found wrong values. Throws
// UsageError for bad options (on every rank, before any collective but the one that agrees
// whether the --json file opened), std::exception for runtime errors.
int run(const Communicator& comm, const Options& opt);

}  // namespace mpitrain::bench
