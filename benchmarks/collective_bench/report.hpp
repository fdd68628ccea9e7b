// What collective_bench prints on rank 0 and writes with --json (DESIGN.md section 8): the
// header, one table line per row, the footers, the JSON document.

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "options.hpp"
#include "row.hpp"

namespace mpitrain::bench {

// An algorithm `--algo all` left out because the Communicator cannot run it on this layout.
struct Skipped {
  std::string algo;
  std::string reason;
};

// Prints the header: the run, the MPI library, the buffers, the time ranks 0 and 1 take to
// pass a cache line (when measured: some node has two ranks or more), one
// `# skipped: <algo> (<reason>)` line per algorithm left out, how iterations are counted, the
// column names.
void print_header(const Options& opt, std::size_t type_count, int world_size, int node_count,
                  const std::vector<Skipped>& skipped = {},
                  std::optional<double> core_latency_ns = std::nullopt);

// Prints `# core latency (WHEN): ...` for Communicator::core_latency_ns measured `when`
// ("start", "end": a virtual machine's cores may move between L3 caches during a run).
void print_core_latency(const char* when, double nanoseconds);

// Prints one table line.
void print_row(const Row& row, std::string_view redop);

// Prints the footers: the average bus bandwidth (overall, then per type and algorithm when
// there are several), the wrong values with --check, and with several types "time vs f32".
void print_footers(const std::vector<Row>& rows, const std::vector<DType>& types,
                   const std::vector<std::string>& algos, bool check, std::uint64_t total_wrong);

// Returns the --json document: {"op", "world_size", "buffers", "in_place", "rows": [...]}.
nlohmann::json json_document(const Options& opt, int world_size, std::string_view redop,
                             const std::vector<Row>& rows);

}  // namespace mpitrain::bench
