#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "group_bench.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain::bench {
namespace {

std::string type_name(DType t) { return std::string(to_string(t)); }

// Prints "# Avg bus bandwidth", then per type and algorithm when a run has several of either.
void print_bandwidth_footers(const std::vector<Row>& rows, const std::vector<DType>& types,
                             const std::vector<std::string>& algos) {
  double sum = 0;
  for (const Row& r : rows) sum += r.busbw;
  std::printf("# Avg bus bandwidth    : %.3f\n", sum / static_cast<double>(rows.size()));
  if (algos.size() <= 1 && types.size() <= 1) return;
  for (DType t : types) {
    for (const std::string& a : algos) {
      double s = 0;
      int k = 0;
      for (const Row& r : rows) {
        if (r.algo == a && r.type == t) s += r.busbw, ++k;
      }
      if (types.size() > 1) {
        const std::string name = type_name(t) + " " + a;
        std::printf("#   %-12s (GB/s) : %.3f\n", name.c_str(), k > 0 ? s / k : 0.0);
      } else {
        std::printf("#   %-8s (GB/s)   : %.3f\n", a.c_str(), k > 0 ? s / k : 0.0);
      }
    }
  }
}

// Prints one line of "time vs f32" per count: f32's size and time, each 16-bit type's ratio.
void print_time_vs_f32_lines(const std::vector<Row>& rows, const std::vector<DType>& halves,
                             const std::string& algo) {
  std::map<std::size_t, std::map<DType, double>> times;  // time_us by (count, type)
  std::map<std::size_t, std::size_t> f32_size;
  for (const Row& r : rows) {
    if (r.algo != algo) continue;
    times[r.count][r.type] = r.time_us;
    if (r.type == DType::f32) f32_size[r.count] = r.size;
  }
  for (const auto& [count, by_type] : times) {
    const auto f32 = by_type.find(DType::f32);
    if (f32 == by_type.end()) continue;
    bool any = false;
    for (DType t : halves) any = any || by_type.count(t) > 0;
    if (!any) continue;
    std::printf("# %12zu %10zu %12.2f", count, f32_size[count], f32->second);
    for (DType t : halves) {
      const auto it = by_type.find(t);
      if (it == by_type.end()) {
        std::printf(" %9s", "-");
      } else {
        std::printf(" %9.3f", it->second / f32->second);
      }
    }
    std::printf("\n");
  }
}

// Prints the footer "# time vs f32 (same element count)": per element count measured in f32
// and in a 16-bit type, the time of each 16-bit type over f32's, for algorithm `algo`.
void print_time_vs_f32(const std::vector<Row>& rows, const std::vector<DType>& types,
                       const std::string& algo) {
  std::vector<DType> halves;
  for (DType t : types) {
    if (t == DType::bf16 || t == DType::f16) halves.push_back(t);
  }
  std::printf("# time vs f32 (same element count): time of each 16-bit type / time of f32, "
              "algo %s, measured side by side\n", algo.c_str());
  if (std::find(types.begin(), types.end(), DType::f32) == types.end() || halves.empty()) {
    std::printf("#   (nothing to compare: --dtype needs f32 and bf16 or f16)\n");
    return;
  }
  std::printf("# %12s %10s %12s", "count", "f32 size", "f32 time_us");
  for (DType t : halves) std::printf(" %9s", (type_name(t) + "/f32").c_str());
  std::printf("\n");
  print_time_vs_f32_lines(rows, halves, algo);
}

}  // namespace

void print_core_latency(const char* when, double nanoseconds) {
  const bool start = std::string_view(when) == "start";
  std::printf("# core latency (%s): ranks 0 and 1 pass a cache line one way in %.0f ns%s\n", when,
              nanoseconds,
              start ? " (tens of ns: one L3 cache; 150 and more: other L3 caches or sockets)" : "");
}

void print_header(const Options& opt, std::size_t type_count, int world_size, int node_count,
                  const std::vector<Skipped>& skipped, std::optional<double> core_latency_ns) {
  std::printf("# collective_bench: %s, %s, %d ranks on %d node(s)\n", opt.op.c_str(),
              opt.dtype.c_str(), world_size, node_count);
  std::printf("# %s\n", MpiRuntime::library_version().substr(0, 60).c_str());
  std::printf("# buffers: %s%s\n",
              opt.buffers == "shared" ? "shared (the node's shared segment)" : "private",
              opt.in_place ? ", in place" : "");
  if (core_latency_ns) print_core_latency("start", *core_latency_ns);
  for (const Skipped& s : skipped) {
    std::printf("# skipped: %s (%s)\n", s.algo.c_str(), s.reason.c_str());
  }
  const bool several = type_count > 1;
  if (opt.iters > 0) {
    std::printf("# %d iterations per %s, interleaved in ~100 us blocks\n", opt.iters,
                several ? "row, the rows of one element count" : "size and algorithm");
  } else {
    std::printf("# iterations: interleaved in ~100 us blocks until every mean time is known "
                "to %.0f%% (%.2f-%.1f s per %s)\n",
                100 * kTargetRelError, kMinSeconds, kMaxSeconds,
                several ? "row, the rows of one element count" : "algorithm and size");
  }
  std::printf("#\n# %10s %12s %6s %6s %12s %12s %8s %8s %7s %7s\n", "size", "count", "type",
              "redop", "algo", "time_us", "algbw", "busbw", "#wrong", "vs_mpi");
  std::printf("# %10s %12s %6s %6s %12s %12s %8s %8s %7s %7s\n", "(B)", "(elements)", "", "",
              "", "(us)", "(GB/s)", "(GB/s)", "", "");
  std::fflush(stdout);
}

void print_row(const Row& row, std::string_view redop) {
  const std::string wrong = row.wrong ? std::to_string(*row.wrong) : "N/A";
  std::printf("  %10zu %12zu %6s %6s %12s %12.2f %8.3f %8.3f %7s %7.3f\n", row.size, row.count,
              type_name(row.type).c_str(), std::string(redop).c_str(), row.algo.c_str(),
              row.time_us, row.algbw, row.busbw, wrong.c_str(), row.vs_mpi);
  std::fflush(stdout);
}

void print_footers(const std::vector<Row>& rows, const std::vector<DType>& types,
                   const std::vector<std::string>& algos, bool check, std::uint64_t total_wrong) {
  print_bandwidth_footers(rows, types, algos);
  if (check) {
    std::printf("# Wrong values         : %llu %s\n", static_cast<unsigned long long>(total_wrong),
                total_wrong == 0 ? "OK" : "FAILED");
  }
  if (types.size() > 1) {
    // Side by side for what the engine uses, or the MPI call when the run leaves default out.
    const bool has_default = std::find(algos.begin(), algos.end(), "default") != algos.end();
    std::printf("#\n");
    print_time_vs_f32(rows, types, has_default ? "default" : "mpi");
  }
  std::printf("#\n");
}

nlohmann::json json_document(const Options& opt, int world_size, std::string_view redop,
                             const std::vector<Row>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    out.push_back({{"size", r.size}, {"count", r.count}, {"type", type_name(r.type)},
                   {"redop", std::string(redop)}, {"algo", r.algo}, {"time_us", r.time_us},
                   {"algbw", r.algbw}, {"busbw", r.busbw},
                   {"wrong", r.wrong ? nlohmann::json(*r.wrong) : nlohmann::json(nullptr)},
                   {"vs_mpi", r.vs_mpi}});
  }
  return nlohmann::json{{"op", opt.op},           {"world_size", world_size},
                        {"buffers", opt.buffers}, {"in_place", opt.in_place},
                        {"rows", out}};
}

}  // namespace mpitrain::bench
