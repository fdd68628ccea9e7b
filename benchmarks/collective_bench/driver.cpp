// Sizes double from --min-bytes to --max-bytes, for every type; `size` is the payload as sent
// (the whole buffer: allreduce and broadcast buffer, reduce_scatter input, allgather output),
// so a bf16 row of N elements has size 2N. Rows are measured in groups of one element count:
// a group holds every (type, algorithm) whose size at that count is in the range, e.g. with
// --dtype f32,bf16 the f32 rows of 4 MiB and the bf16 rows of 2 MiB (both 1M elements);
// GroupBench measures a group. The plain MPI call (`mpi`) is always measured: vs_mpi divides
// every row's busbw by the busbw of the mpi row of its type and size.

#include "driver.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective_table.hpp"
#include "group_bench.hpp"
#include "report.hpp"

namespace mpitrain::bench {
namespace {

// Returns the --algo names of a run: "mpi" first (every row is compared with it), then every
// algorithm `--algo all` measures, or the one named.
std::vector<std::string> parse_algos(const CollectiveDescriptor& collective,
                                     const std::string& op, const std::string& text) {
  const std::vector<AlgorithmName> offered = collective.algorithms();
  std::vector<std::string> algos{"mpi"};
  if (text == "all") {
    for (const AlgorithmName& a : offered) {
      if (a.name != "mpi") algos.push_back(a.name);
    }
    return algos;
  }
  const auto named = std::find_if(offered.begin(), offered.end(),
                                  [&](const AlgorithmName& a) { return a.name == text; });
  if (named == offered.end()) {
    std::string valid;
    for (const AlgorithmName& a : offered) valid += a.name + ", ";
    throw UsageError("--algo: unknown algorithm '" + text + "' for " + op + " (valid: " + valid +
                     "all)");
  }
  if (text != "mpi") algos.push_back(text);
  return algos;
}

// Returns the groups of a run: each element count, ascending, with the types (in --dtype
// order) whose payload at that count, count * element bytes, is one of the sizes doubling
// from min_bytes to max_bytes.
std::map<std::size_t, std::vector<DType>> groups_of(const std::vector<DType>& types,
                                                    std::size_t min_bytes, std::size_t max_bytes) {
  std::map<std::size_t, std::vector<DType>> groups;
  for (DType type : types) {
    for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      std::vector<DType>& group = groups[std::max<std::size_t>(1, bytes / dtype_bytes(type))];
      if (std::find(group.begin(), group.end(), type) == group.end()) group.push_back(type);
      if (bytes > max_bytes / 2) break;  // no overflow past the last size
    }
  }
  for (auto& [count, group] : groups) {  // back into --dtype order
    std::vector<DType> ordered;
    for (DType type : types) {
      if (std::find(group.begin(), group.end(), type) != group.end()) ordered.push_back(type);
    }
    group = std::move(ordered);
  }
  return groups;
}

// The options of a run, parsed and checked.
struct Plan {
  std::unique_ptr<CollectiveDescriptor> collective;
  std::vector<DType> types;
  std::vector<std::string> algos;
  std::size_t min_bytes = 0;
  std::size_t max_bytes = 0;
};

// Returns the plan of `opt`; throws UsageError naming the bad option.
Plan plan_of(const Options& opt) {
  Plan p;
  try {
    p.collective = make_descriptor(opt.op);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--op: ") + e.what());
  }
  p.types = parse_dtypes(opt.dtype);
  p.algos = parse_algos(*p.collective, opt.op, opt.algo);
  p.min_bytes = parse_bytes("--min-bytes", opt.min_bytes);
  p.max_bytes = parse_bytes("--max-bytes", opt.max_bytes);
  if (p.min_bytes > p.max_bytes) {
    throw UsageError("--min-bytes (" + opt.min_bytes + ") is larger than --max-bytes (" +
                     opt.max_bytes + ")");
  }
  if (opt.buffers != "private" && opt.buffers != "shared") {
    throw UsageError("--buffers: '" + opt.buffers + "' is neither private nor shared");
  }
  const int probe_ranks = 2;
  const Layout probe = p.collective->layout(16, probe_ranks);
  if (opt.in_place && probe.recv_count > 0 && !p.collective->in_place_offset(probe, 0)) {
    throw UsageError("--in-place: " + opt.op + " has no in-place form");
  }
  if (opt.iters < 0) throw UsageError("--iters must be positive");
  if (opt.warmup < -1) throw UsageError("--warmup must be 0 or more");
  return p;
}

// Removes from plan.algos, under `--algo all`, every algorithm the Communicator reports it
// cannot run on this launch's layout for one of the plan's types (shm when the ranks span
// nodes, hierarchical on one node), and returns each one removed with its reason (the header
// names them). A single named algorithm is left to fail with its reason.
std::vector<Skipped> skip_unrunnable(const Communicator& comm, const Options& opt, Plan& plan) {
  std::vector<Skipped> skipped;
  if (opt.algo != "all") return skipped;
  const Collective op = parse_collective(opt.op);
  const ReduceOp reduce =
      plan.collective->redop() == "none" ? ReduceOp::sum : parse_reduce_op(plan.collective->redop());
  std::erase_if(plan.algos, [&](const std::string& algo) {
    for (DType type : plan.types) {
      std::string why = comm.cannot_run(algo, op, type, reduce);
      if (why.empty()) continue;
      // "<call>: algorithm 'x' cannot run it: <reason>": the reason alone.
      const std::string marker = "cannot run it: ";
      if (const std::size_t at = why.find(marker); at != std::string::npos) {
        why = why.substr(at + marker.size());
      }
      skipped.push_back({algo, std::move(why)});
      return true;
    }
    return false;
  });
  return skipped;
}

// Returns the --json file, open on rank 0 (closed elsewhere and without --json); every rank
// throws UsageError when rank 0 cannot write it.
std::ofstream open_json(const Communicator& comm, const std::string& path) {
  std::ofstream file;
  bool ok = true;
  if (!path.empty() && comm.rank() == 0) {
    file.open(path);
    ok = static_cast<bool>(file);
  }
  if (comm.allreduce_value(ok ? 0 : 1, ReduceOp::max) != 0) {
    throw UsageError("--json: cannot write '" + path + "'");
  }
  return file;
}

}  // namespace

std::vector<Row> run_rows(const Communicator& comm, const Options& opt) {
  Plan plan = plan_of(opt);
  const std::vector<Skipped> skipped = skip_unrunnable(comm, opt, plan);
  const bool print = comm.rank() == 0;
  const std::string_view redop = plan.collective->redop();
  const std::optional<double> latency_at_start = comm.core_latency_ns();
  if (print) {
    print_header(opt, plan.types.size(), comm.size(), comm.node_count(), skipped,
                 latency_at_start);
  }
  const auto groups = groups_of(plan.types, plan.min_bytes, plan.max_bytes);
  const Placement placement{opt.buffers == "shared", opt.in_place};
  std::size_t shared_capacity = 0;
  for (const auto& [count, group] : groups) {
    shared_capacity = std::max(shared_capacity, GroupBench::bytes_needed(*plan.collective, count,
                                                                         group, comm.size(),
                                                                         opt.in_place));
  }
  GroupBench bench(comm, *plan.collective, plan.algos, placement,
                   placement.shared ? shared_capacity : 0);
  std::vector<Row> rows;
  for (const auto& [count, group] : groups) {
    for (const Row& row : bench.run(count, group, opt.iters, opt.warmup, opt.check)) {
      if (print) print_row(row, redop);
      rows.push_back(row);
    }
  }
  const std::optional<double> latency_at_end = comm.core_latency_ns();
  if (print && latency_at_end) print_core_latency("end", *latency_at_end);
  return rows;
}

int run(const Communicator& comm, const Options& opt) {
  Plan plan = plan_of(opt);
  (void)skip_unrunnable(comm, opt, plan);  // the footers list the algorithms run_rows ran
  std::ofstream json_file = open_json(comm, opt.json);
  const bool print = comm.rank() == 0;
  const std::string_view redop = plan.collective->redop();
  const std::vector<Row> all_rows = run_rows(comm, opt);
  std::uint64_t total_wrong = 0;
  for (const Row& row : all_rows) total_wrong += row.wrong.value_or(0);

  if (print) {
    print_footers(all_rows, plan.types, plan.algos, opt.check, total_wrong);
    if (json_file.is_open()) {
      json_file << json_document(opt, comm.size(), redop, all_rows).dump(1) << '\n';
    }
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace mpitrain::bench
