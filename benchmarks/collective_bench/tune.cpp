// --tune: the size sweep of every collective with every algorithm, reduced to selection rules.
//
// Cost: the sweeps of four collectives x the --dtype list x every algorithm, each row timed
// as any collective_bench row (until its mean is known to 1%, or --iters).

#include "tune.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "driver.hpp"

namespace mpitrain::bench {
namespace {

constexpr double kMustBeatMpi = 0.97;  // time ratio a winner needs against mpi

// Returns the per-call bytes the Communicator's selection compares, for a row of `op`.
std::size_t query_bytes(Collective op, const Row& row, int ranks) {
  const bool per_rank_block = op == Collective::reduce_scatter || op == Collective::allgather;
  return per_rank_block ? row.size / static_cast<std::size_t>(ranks) : row.size;
}

// Returns the algorithm to run at one size: the fastest row, unless mpi is within 3%.
std::string winner(const std::vector<const Row*>& at_size) {
  const Row* best = nullptr;
  const Row* mpi = nullptr;
  for (const Row* r : at_size) {
    if (r->algo == "default") continue;
    if (r->algo == "mpi") mpi = r;
    if (best == nullptr || r->time_us < best->time_us) best = r;
  }
  if (mpi != nullptr && best != mpi && best->time_us > kMustBeatMpi * mpi->time_us) return "mpi";
  return best == nullptr ? "mpi" : best->algo;
}

}  // namespace

std::vector<SelectionRule> rules_from_rows(Collective op, DType type, const std::vector<Row>& rows,
                                           int ranks, int local_ranks, int nodes) {
  std::map<std::size_t, std::vector<const Row*>> by_size;
  for (const Row& r : rows) {
    if (r.type == type) by_size[query_bytes(op, r, ranks)].push_back(&r);
  }
  std::vector<SelectionRule> rules;
  std::size_t previous_bytes = 0;
  for (const auto& [bytes, at_size] : by_size) {
    const std::string algo = winner(at_size);
    if (!rules.empty() && rules.back().algorithm == algo) {
      previous_bytes = bytes;
      continue;
    }
    const std::size_t start =
        rules.empty() ? 0
                      : static_cast<std::size_t>(std::sqrt(static_cast<double>(previous_bytes) *
                                                           static_cast<double>(bytes)));
    if (!rules.empty()) rules.back().end_bytes = start;
    SelectionRule r;
    r.op = op;
    r.types = dtype_set({type});
    r.wire = SelectionRule::Wire::no;
    r.min_ranks = r.max_ranks = ranks;
    r.min_local_ranks = r.max_local_ranks = local_ranks;
    r.min_nodes = r.max_nodes = nodes;
    r.min_bytes = start;
    r.algorithm = algo;
    rules.push_back(r);
    previous_bytes = bytes;
  }
  return rules;
}

int tune(const Communicator& comm, Options opt) {
  // The table's rules apply to every buffer a program passes: measure on ordinary ones.
  if (opt.buffers != "private" || opt.in_place) {
    throw UsageError("--tune measures ordinary buffers out of place (the table applies to any "
                     "buffer): leave out --buffers shared and --in-place");
  }
  const std::string path = opt.tune;
  opt.tune.clear();
  opt.algo = "all";
  opt.json.clear();
  if (opt.dtype == "f32") opt.dtype = "f32,bf16,f16";  // the command line's default: tune all
  std::vector<SelectionRule> rules;
  for (Collective op : {Collective::allreduce, Collective::reduce_scatter, Collective::allgather,
                        Collective::broadcast}) {
    opt.op = std::string(to_string(op));
    const std::vector<Row> rows = run_rows(comm, opt);
    for (DType type : parse_dtypes(opt.dtype)) {
      for (SelectionRule& r : rules_from_rows(op, type, rows, comm.size(), comm.local_size(),
                                              comm.node_count())) {
        rules.push_back(std::move(r));
      }
    }
  }
  const AlgorithmSelection builtin_table = AlgorithmSelection::builtin();
  const std::vector<SelectionRule>& builtin = builtin_table.rules();
  rules.insert(rules.end(), builtin.begin(), builtin.end());
  if (comm.rank() == 0) {
    const std::time_t now = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    AlgorithmSelection(rules).save(
        path, fmt::format("collective_bench --tune at {} rank(s), {} per node, {} node(s), {}",
                          comm.size(), comm.local_size(), comm.node_count(), when));
    std::printf("# algorithm table written to %s (%zu rules)\n", path.c_str(), rules.size());
  }
  return 0;
}

}  // namespace mpitrain::bench
