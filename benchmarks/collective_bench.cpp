// collective_bench: bandwidth of the Communicator's collectives, nccl-tests style
// (output contract: DESIGN.md section 8).
//
//   mpirun -np N collective_bench [--op allreduce|reduce_scatter|allgather|broadcast]
//       [--dtype f32|f64|bf16|f16[,...]] [--algo NAME|all] [--min-bytes 1K]
//       [--max-bytes 256M] [--iters N] [--warmup N] [--check] [--json FILE]
//
// Sizes double from --min-bytes to --max-bytes, for every type; `size` is the payload as sent
// (the whole buffer: allreduce and broadcast buffer, reduce_scatter input, allgather output),
// so a bf16 row of N elements has size 2N. Rows are measured in groups of one element count:
// a group holds every (type, algorithm) whose size at that count is in the range, e.g. with
// --dtype f32,bf16 the f32 rows of 4 MiB and the bf16 rows of 2 MiB (both 1M elements).
// Within a group every row runs the same number of iterations, and the rows take turns in
// blocks of about 100 us, each row following every other one equally often (mpi default
// mpi ring default ring, ...), so that the noise of a shared machine, and what one row
// leaves in the caches for the next, hit them alike. Without --iters the run goes on until every
// mean is known to 1% (standard error over the blocks), between 0.25 and 2.5 s per row. The
// plain MPI call (`mpi`) is always measured: vs_mpi divides every row's busbw by the busbw
// of the mpi row of its type and size. Time per iteration is the mean over the iterations,
// maximum over ranks; algbw = size / time; busbw = algbw * factor (allreduce 2(n-1)/n,
// reduce_scatter and allgather (n-1)/n, broadcast 1).
//
// With several types and f32 among them, a footer "# time vs f32 (same element count)"
// gives, per element count, each 16-bit type's time over f32's time, both for the default
// algorithm (mpi when --algo leaves default out): the ratios of one group, measured side by
// side.
//
// Exit codes: 0 done; 1 --check found wrong values, or a runtime error; 2 bad options (on every
// rank, before any collective, so nothing hangs).

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

enum class Op { allreduce, reduce_scatter, allgather, broadcast };

struct Options {
  std::string op = "allreduce";
  std::string dtype = "f32";
  std::string algo = "all";
  std::string min_bytes = "1K";
  std::string max_bytes = "256M";
  int iters = 0;    // 0: scaled by size
  int warmup = -1;  // -1: scaled by size
  bool check = false;
  std::string json;
};

// Usage errors: reported by rank 0, exit code 2 on every rank.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Op parse_op(const std::string& name) {
  if (name == "allreduce") return Op::allreduce;
  if (name == "reduce_scatter") return Op::reduce_scatter;
  if (name == "allgather") return Op::allgather;
  if (name == "broadcast") return Op::broadcast;
  throw UsageError("--op: unknown collective '" + name +
                   "' (valid: allreduce, reduce_scatter, allgather, broadcast)");
}

// Returns the byte count written as a number with an optional binary suffix
// (K/KB/KiB = 2^10, M = 2^20, G = 2^30; case-insensitive).
std::size_t parse_bytes(const std::string& flag, const std::string& text) {
  std::size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw UsageError(flag + ": '" + text + "' is not a size (e.g. 4096, 1K, 256M, 1G)");
  }
  std::string suffix = text.substr(pos);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix == "" || suffix == "B") shift = 0;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") shift = 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") shift = 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") shift = 30;
  else throw UsageError(flag + ": '" + text + "' is not a size (e.g. 4096, 1K, 256M, 1G)");
  if (value == 0 || value > (1ull << 40) >> shift) {
    throw UsageError(flag + ": '" + text + "' must be between 1 byte and 1 TiB");
  }
  return static_cast<std::size_t>(value) << shift;
}

// The algorithms of a run. "mpi" is always first: every row is compared with it.
struct Algo {
  std::string name;  // as the Communicator takes it (--op allreduce); the MPI call otherwise
};

std::vector<Algo> parse_algos(Op op, const std::string& text) {
  std::vector<Algo> algos{{"mpi"}};
  if (op == Op::allreduce) {
    if (text == "all") {
      for (std::string_view a : algorithm_names(Collective::allreduce)) {
        if (a != "mpi") algos.push_back({std::string(a)});
      }
      return algos;
    }
    try {
      require_algorithm(Collective::allreduce, text);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--algo: ") + e.what() + " (or all)");
    }
    if (text != "mpi") algos.push_back({text});
    return algos;
  }
  // The other collectives have one implementation, the MPI call; "default" (what the engine
  // uses) names the same call, so its row measures the noise between two identical runs.
  if (text == "all" || text == "mpi") return algos;
  if (text == "default") {
    algos.push_back({"default"});
    return algos;
  }
  throw UsageError("--algo: unknown algorithm '" + text + "' for this collective (valid: " +
                   "default, mpi, all)");
}

// Returns the types of a comma-separated --dtype list, in the order given.
std::vector<DType> parse_dtypes(const std::string& text) {
  std::vector<DType> types;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string name = text.substr(begin, end - begin);
    if (name != "f32" && name != "f64" && name != "bf16" && name != "f16") {
      throw UsageError("--dtype: unknown type '" + name +
                       "' (valid: f32, f64, bf16, f16, or a comma-separated list of them)");
    }
    const DType type = parse_dtype(name);
    if (std::find(types.begin(), types.end(), type) != types.end()) {
      throw UsageError("--dtype: '" + name + "' is listed twice in '" + text + "'");
    }
    types.push_back(type);
    if (end == text.size()) break;
    begin = end + 1;
  }
  return types;
}

// ---- closed-form data ------------------------------------------------------------------------
// Rank r contributes v(r, i) = ((i + 3 r) mod 7) - 3, small integers whose sums over up to
// 85 ranks (|sum| <= 256) are exact in every type, bf16 included.

double value(int rank, std::size_t i) {
  return static_cast<double>((i + 3 * static_cast<std::size_t>(rank)) % 7) - 3.0;
}

double expected_sum(int nranks, std::size_t i) {
  double s = 0;
  for (int r = 0; r < nranks; ++r) s += value(r, i);
  return s;
}

void store(std::byte* buf, std::size_t i, DType type, double v) {
  switch (type) {
    case DType::f32: reinterpret_cast<float*>(buf)[i] = static_cast<float>(v); return;
    case DType::f64: reinterpret_cast<double*>(buf)[i] = v; return;
    case DType::bf16: reinterpret_cast<bfloat16*>(buf)[i] = to_bfloat16(static_cast<float>(v)); return;
    case DType::f16: reinterpret_cast<float16*>(buf)[i] = to_float16(static_cast<float>(v)); return;
    default: return;
  }
}

double load(const std::byte* buf, std::size_t i, DType type) {
  switch (type) {
    case DType::f32: return reinterpret_cast<const float*>(buf)[i];
    case DType::f64: return reinterpret_cast<const double*>(buf)[i];
    case DType::bf16: return to_float(reinterpret_cast<const bfloat16*>(buf)[i]);
    case DType::f16: return to_float(reinterpret_cast<const float16*>(buf)[i]);
    default: return 0;
  }
}

// ---- one size ------------------------------------------------------------------------------------

struct Row {
  DType type = DType::f32;
  std::size_t size = 0;   // bytes as sent
  std::size_t count = 0;  // elements of the whole buffer
  std::string algo;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  std::optional<std::uint64_t> wrong;
  double vs_mpi = 0;
};

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
// Seconds between checks of the stopping rule (each check is one small allreduce), as
// estimated from the probe.
constexpr double kCheckSeconds = 0.05;
// Length of one interleaved block of iterations of one row: short, so that a burst of load on
// the (shared, 2-core) machine falls on every row alike.
constexpr double kBlockSeconds = 1e-4;

// Block times of one algorithm: their sum, and what the standard error needs.
struct BlockStats {
  double seconds = 0;
  double sum_sq = 0;  // of per-iteration times, one per block
  int blocks = 0;
  void add(double block_seconds, int iters) {
    seconds += block_seconds;
    const double per_iter = block_seconds / iters;
    sum_sq += per_iter * per_iter;
    ++blocks;
  }
  // Returns the standard error of the mean per-iteration time, relative to that mean.
  double rel_error(int iters_per_block) const {
    if (blocks < 2) return 1.0;
    const double mean = seconds / iters_per_block / blocks;
    const double var = std::max(0.0, (sum_sq - blocks * mean * mean) / (blocks - 1));
    return std::sqrt(var / blocks) / mean;
  }
};

// Returns the order in which k rows take turns: a closed walk through the complete directed
// graph on 0..k-1 that takes every edge (a, b), a != b, exactly once (an Eulerian circuit,
// found with Hierholzer's algorithm), as its k(k-1) vertices; [0] when k is 1. Every row
// appears k-1 times and follows every other row exactly once, the walk's end included (it
// closes on its start). Deterministic: every rank derives the same order.
std::vector<std::size_t> balanced_order(std::size_t k) {
  if (k <= 1) return {0};
  std::vector<std::vector<std::size_t>> unused(k);  // out-edges not taken, smallest last
  for (std::size_t a = 0; a < k; ++a) {
    for (std::size_t b = k; b-- > 0;) {
      if (b != a) unused[a].push_back(b);
    }
  }
  std::vector<std::size_t> path{0};
  std::vector<std::size_t> circuit;
  while (!path.empty()) {
    const std::size_t v = path.back();
    if (unused[v].empty()) {
      circuit.push_back(v);
      path.pop_back();
    } else {
      path.push_back(unused[v].back());
      unused[v].pop_back();
    }
  }
  std::reverse(circuit.begin(), circuit.end());
  circuit.pop_back();  // the circuit ends where it began
  return circuit;
}

// The buffers of one type in a group: this rank's input and the output.
struct Buffers {
  DType type = DType::f32;
  std::size_t esize = 0;
  std::size_t count = 0;  // elements of the whole buffer (see Row::count)
  std::size_t block = 0;  // elements per rank (reduce_scatter, allgather), else count
  std::vector<std::byte> send;
  std::vector<std::byte> recv;
};

class Bench {
 public:
  Bench(const Communicator& comm, Op op, std::vector<Algo> algos)
      : comm_(comm), op_(op), algos_(std::move(algos)) {}

  // Returns the rows of one group: for each type of `types` (in that order), one row per
  // algorithm, for buffers of about `nominal_count` elements. Every row runs the same number
  // of iterations, the rows taking turns. iters and warmup: counts per row, or 0 / -1 to
  // size them from a timed probe.
  std::vector<Row> run(std::size_t nominal_count, const std::vector<DType>& types, int iters,
                       int warmup, bool check) {
    const std::size_t n = static_cast<std::size_t>(comm_.size());
    std::size_t count = std::max<std::size_t>(1, nominal_count);
    if (op_ == Op::reduce_scatter || op_ == Op::allgather) {
      count = std::max(n, count / n * n);  // whole blocks of count / n elements
    }
    const std::size_t block = (op_ == Op::reduce_scatter || op_ == Op::allgather) ? count / n : count;
    buffers_.clear();  // the previous group's memory goes first
    buffers_.resize(types.size());
    for (std::size_t t = 0; t < types.size(); ++t) allocate_and_fill(buffers_[t], types[t], count, block);
    // Rows of the group: type-major, the algorithms in their order (mpi first).
    struct Case {
      std::size_t buffers;
      std::size_t algo;
    };
    std::vector<Case> cases;
    for (std::size_t t = 0; t < types.size(); ++t) {
      for (std::size_t a = 0; a < algos_.size(); ++a) cases.push_back({t, a});
    }
    auto execute_case = [&](const Case& c) { execute(buffers_[c.buffers], algos_[c.algo]); };

    // Warm-up (pages touched, connections set up), then a probe of the first type's MPI
    // baseline: its time per call, maximum over ranks (so every rank decides alike), sets
    // the block length.
    for (const Case& c : cases) {
      for (int k = 0; k < (warmup >= 0 ? warmup : 2); ++k) execute_case(c);
    }
    comm_.barrier();
    const auto p0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kProbeIters; ++k) execute_case(cases.front());
    const double probe = std::max(
        1e-7, comm_.allreduce_value(seconds_since(p0), ReduceOp::max) / kProbeIters);
    const int block_iters_max =
        iters > 0 ? static_cast<int>(std::clamp(kBlockSeconds / probe, 1.0, double(iters)))
                  : static_cast<int>(std::max(1.0, kBlockSeconds / probe));

    // Interleave: blocks of `block_iters_max` iterations per row, in the order of a closed
    // walk that takes every ordered pair of distinct rows exactly once (with rows a, b, c:
    // a b a c b c, then again), so that every row follows every other one equally often and
    // never itself: what a row leaves in the caches and in MPI's buffers is the same for
    // every row that follows it. (Rotating one order, a b c, b c a, c a b, would always put
    // b after a: at sizes where a block is one iteration that bias reached 15%.) With --iters
    // the count is fixed; otherwise the ranks agree every kCheckSeconds whether to go on.
    // The check happens at the end of a walk, every `check_walks` walks, a number every
    // rank derives from the agreed probe: ranks must not decide on their own clocks when to
    // enter the allreduce. After each walk every row has run the same number of iterations.
    const std::vector<std::size_t> walk = balanced_order(cases.size());
    const double walk_seconds = probe * block_iters_max * static_cast<double>(walk.size());
    const int check_walks = static_cast<int>(std::max(1.0, kCheckSeconds / walk_seconds));
    std::vector<BlockStats> stats(cases.size());
    std::vector<int> done(cases.size(), 0);  // iterations run, per row
    const auto start = std::chrono::steady_clock::now();
    for (int w = 0;; ++w) {
      if (iters > 0 && done.front() >= iters) break;
      for (std::size_t c : walk) {
        const int block_iters = iters > 0 ? std::min(block_iters_max, iters - done[c]) : block_iters_max;
        if (block_iters == 0) continue;  // this row has its --iters (same on every rank)
        comm_.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < block_iters; ++k) execute_case(cases[c]);
        stats[c].add(seconds_since(t0), block_iters);
        done[c] += block_iters;
      }
      if (iters > 0 || (w + 1) % check_walks != 0) continue;
      const double per_case = seconds_since(start) / static_cast<double>(cases.size());
      double worst = 0;
      for (const BlockStats& st : stats) worst = std::max(worst, st.rel_error(block_iters_max));
      const bool more = per_case < kMinSeconds || done.front() < kMinIters ||
                        (worst > kTargetRelError && per_case < kMaxSeconds &&
                         done.front() < kMaxIters);
      if (comm_.allreduce_value(more ? 1 : 0, ReduceOp::max) == 0) break;
    }

    std::vector<Row> rows;
    const double factor = bus_factor();
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const Buffers& b = buffers_[cases[c].buffers];
      Row row;
      row.type = b.type;
      row.size = b.count * b.esize;
      row.count = b.count;
      row.algo = algos_[cases[c].algo].name;
      const double t = comm_.allreduce_value(stats[c].seconds, ReduceOp::max) / done[c];
      row.time_us = t * 1e6;
      row.algbw = static_cast<double>(row.size) / t / 1e9;
      row.busbw = row.algbw * factor;
      if (check) row.wrong = verify(buffers_[cases[c].buffers], algos_[cases[c].algo]);
      rows.push_back(row);
    }
    // vs_mpi: against the mpi row of the same type (algos_ starts with mpi).
    for (std::size_t c = 0; c < cases.size(); ++c) {
      rows[c].vs_mpi = rows[c].busbw / rows[c - cases[c].algo].busbw;
    }
    return rows;
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  double bus_factor() const {
    const double n = comm_.size();
    switch (op_) {
      case Op::allreduce: return 2.0 * (n - 1) / n;
      case Op::reduce_scatter:
      case Op::allgather: return (n - 1) / n;
      case Op::broadcast: return 1.0;
    }
    return 1.0;
  }

  // send: this rank's input; recv: the output (broadcast works in place on send).
  void allocate_and_fill(Buffers& b, DType type, std::size_t count, std::size_t block) const {
    b.type = type;
    b.esize = dtype_bytes(type);
    b.count = count;
    b.block = block;
    std::size_t send_elems = count;
    std::size_t recv_elems = count;
    if (op_ == Op::reduce_scatter) recv_elems = block;
    if (op_ == Op::allgather) send_elems = block;
    if (op_ == Op::broadcast) recv_elems = 0;
    b.send.assign(send_elems * b.esize, std::byte{0});
    b.recv.assign(recv_elems * b.esize, std::byte{0});
    fill_input(b);
  }

  void fill_input(Buffers& b) const {
    const int rank = comm_.rank();
    const std::size_t send_elems = b.send.size() / b.esize;
    if (op_ == Op::broadcast && rank != 0) {
      std::memset(b.send.data(), 0xff, b.send.size());  // NaN in every float type
      return;
    }
    const std::size_t base = op_ == Op::allgather ? static_cast<std::size_t>(rank) * b.block : 0;
    for (std::size_t i = 0; i < send_elems; ++i) store(b.send.data(), i, b.type, value(rank, base + i));
  }

  void execute(Buffers& b, const Algo& a) const {
    switch (op_) {
      case Op::allreduce:
        comm_.allreduce(b.send.data(), b.recv.data(), b.count, b.type, ReduceOp::sum, a.name);
        return;
      case Op::reduce_scatter:
        comm_.reduce_scatter(b.send.data(), b.recv.data(), b.block, b.type, ReduceOp::sum);
        return;
      case Op::allgather:
        comm_.allgather(b.send.data(), b.recv.data(), b.block, b.type);
        return;
      case Op::broadcast:
        comm_.broadcast(b.send.data(), b.count, b.type, 0);
        return;
    }
  }

  // Returns the number of wrong elements over all ranks after one fresh run of `a`.
  std::uint64_t verify(Buffers& b, const Algo& a) const {
    fill_input(b);
    std::memset(b.recv.data(), 0xff, b.recv.size());
    execute(b, a);
    const int rank = comm_.rank();
    const int n = comm_.size();
    const DType type = b.type;
    std::uint64_t wrong = 0;
    switch (op_) {
      case Op::allreduce:
        for (std::size_t i = 0; i < b.count; ++i) wrong += load(b.recv.data(), i, type) != expected_sum(n, i);
        break;
      case Op::reduce_scatter: {
        const std::size_t base = static_cast<std::size_t>(rank) * b.block;
        for (std::size_t i = 0; i < b.block; ++i) {
          wrong += load(b.recv.data(), i, type) != expected_sum(n, base + i);
        }
        break;
      }
      case Op::allgather:
        for (std::size_t i = 0; i < b.count; ++i) {
          wrong += load(b.recv.data(), i, type) != value(static_cast<int>(i / b.block), i);
        }
        break;
      case Op::broadcast:
        for (std::size_t i = 0; i < b.count; ++i) wrong += load(b.send.data(), i, type) != value(0, i);
        break;
    }
    return static_cast<std::uint64_t>(
        comm_.allreduce_value(static_cast<std::int64_t>(wrong), ReduceOp::sum));
  }

  const Communicator& comm_;
  Op op_;
  std::vector<Algo> algos_;
  std::vector<Buffers> buffers_;
};

std::string redop_name(Op op) {
  return op == Op::allreduce || op == Op::reduce_scatter ? "sum" : "none";
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
  for (DType t : halves) {
    std::printf(" %9s", (std::string(to_string(t)) + "/f32").c_str());
  }
  std::printf("\n");
  // time_us by (count, type) for the footer's algorithm.
  std::map<std::size_t, std::map<DType, double>> times;
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

int run(const Communicator& comm, const Options& opt) {
  const Op op = parse_op(opt.op);
  const std::vector<DType> types = parse_dtypes(opt.dtype);
  const std::vector<Algo> algos = parse_algos(op, opt.algo);
  const std::size_t min_bytes = parse_bytes("--min-bytes", opt.min_bytes);
  const std::size_t max_bytes = parse_bytes("--max-bytes", opt.max_bytes);
  if (min_bytes > max_bytes) {
    throw UsageError("--min-bytes (" + opt.min_bytes + ") is larger than --max-bytes (" +
                     opt.max_bytes + ")");
  }
  if (opt.iters < 0) throw UsageError("--iters must be positive");
  if (opt.warmup < -1) throw UsageError("--warmup must be 0 or more");
  std::ofstream json_file;
  bool json_ok = true;
  if (!opt.json.empty() && comm.rank() == 0) {
    json_file.open(opt.json);
    json_ok = static_cast<bool>(json_file);
  }
  if (comm.allreduce_value(json_ok ? 0 : 1, ReduceOp::max) != 0) {
    throw UsageError("--json: cannot write '" + opt.json + "'");
  }

  const bool print = comm.rank() == 0;
  if (print) {
    std::printf("# collective_bench: %s, %s, %d ranks on %d node(s)\n", opt.op.c_str(),
                opt.dtype.c_str(), comm.size(), comm.node_count());
    std::printf("# %s\n", MpiRuntime::library_version().substr(0, 60).c_str());
    const bool several = types.size() > 1;
    if (opt.iters > 0) {
      std::printf("# %d iterations per %s, interleaved in ~100 us blocks\n", opt.iters,
                  several ? "row, the rows of one element count" : "size and algorithm");
    } else {
      std::printf("# iterations: interleaved in ~100 us blocks until every mean time is known "
                  "to %.0f%% (%.2f-%.1f s per %s)\n",
                  100 * kTargetRelError, kMinSeconds, kMaxSeconds,
                  several ? "row, the rows of one element count" : "algorithm and size");
    }
    std::printf("#\n# %10s %12s %6s %6s %8s %12s %8s %8s %7s %7s\n", "size", "count", "type",
                "redop", "algo", "time_us", "algbw", "busbw", "#wrong", "vs_mpi");
    std::printf("# %10s %12s %6s %6s %8s %12s %8s %8s %7s %7s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "");
    std::fflush(stdout);
  }

  Bench bench(comm, op, algos);
  std::vector<Row> all_rows;
  std::uint64_t total_wrong = 0;
  for (const auto& [count, group] : groups_of(types, min_bytes, max_bytes)) {
    for (const Row& row : bench.run(count, group, opt.iters, opt.warmup, opt.check)) {
      if (print) {
        const std::string wrong = row.wrong ? std::to_string(*row.wrong) : "N/A";
        std::printf("  %10zu %12zu %6s %6s %8s %12.2f %8.3f %8.3f %7s %7.3f\n", row.size,
                    row.count, std::string(to_string(row.type)).c_str(), redop_name(op).c_str(),
                    row.algo.c_str(), row.time_us, row.algbw, row.busbw, wrong.c_str(),
                    row.vs_mpi);
        std::fflush(stdout);
      }
      total_wrong += row.wrong.value_or(0);
      all_rows.push_back(row);
    }
  }

  if (print) {
    double sum = 0;
    for (const Row& r : all_rows) sum += r.busbw;
    std::printf("# Avg bus bandwidth    : %.3f\n", sum / static_cast<double>(all_rows.size()));
    if (algos.size() > 1 || types.size() > 1) {
      for (DType t : types) {
        for (const Algo& a : algos) {
          double s = 0;
          int k = 0;
          for (const Row& r : all_rows) {
            if (r.algo == a.name && r.type == t) s += r.busbw, ++k;
          }
          if (types.size() > 1) {
            const std::string name = std::string(to_string(t)) + " " + a.name;
            std::printf("#   %-12s (GB/s) : %.3f\n", name.c_str(), k > 0 ? s / k : 0.0);
          } else {
            std::printf("#   %-8s (GB/s)   : %.3f\n", a.name.c_str(), k > 0 ? s / k : 0.0);
          }
        }
      }
    }
    if (opt.check) {
      std::printf("# Wrong values         : %llu %s\n", static_cast<unsigned long long>(total_wrong),
                  total_wrong == 0 ? "OK" : "FAILED");
    }
    if (types.size() > 1) {
      const bool has_default = std::any_of(algos.begin(), algos.end(),
                                           [](const Algo& a) { return a.name == "default"; });
      std::printf("#\n");
      print_time_vs_f32(all_rows, types, has_default ? "default" : "mpi");
    }
    std::printf("#\n");
    if (json_file) {
      nlohmann::json rows = nlohmann::json::array();
      for (const Row& r : all_rows) {
        rows.push_back({{"size", r.size}, {"count", r.count}, {"type", std::string(to_string(r.type))},
                        {"redop", redop_name(op)}, {"algo", r.algo}, {"time_us", r.time_us},
                        {"algbw", r.algbw}, {"busbw", r.busbw},
                        {"wrong", r.wrong ? nlohmann::json(*r.wrong) : nlohmann::json(nullptr)},
                        {"vs_mpi", r.vs_mpi}});
      }
      json_file << nlohmann::json{{"op", opt.op}, {"world_size", comm.size()}, {"rows", rows}}.dump(1)
                << '\n';
    }
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace mpitrain

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

  Options opt;
  CLI::App app{"collective_bench: bandwidth of mpitrain's collectives (nccl-tests columns)"};
  app.add_option("--op", opt.op, "allreduce | reduce_scatter | allgather | broadcast");
  app.add_option("--dtype", opt.dtype,
                 "f32 | f64 | bf16 | f16, or a comma-separated list (f32,bf16) measured "
                 "side by side");
  app.add_option("--algo", opt.algo, "algorithm name (allreduce: default, mpi, ring) or all");
  app.add_option("--min-bytes", opt.min_bytes, "smallest payload, e.g. 1K");
  app.add_option("--max-bytes", opt.max_bytes, "largest payload, e.g. 256M");
  app.add_option("--iters", opt.iters, "iterations per size and algorithm (default: until the means are known to 1%)");
  app.add_option("--warmup", opt.warmup, "warm-up iterations per row (default: 2)");
  app.add_flag("--check", opt.check, "verify results against closed-form values");
  app.add_option("--json", opt.json, "also write the rows as JSON to FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank ends here; only rank 0 talks.
    if (rank0) app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }

  try {
    return run(comm, opt);
  } catch (const UsageError& e) {
    if (rank0) std::fprintf(stderr, "collective_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: error on rank %d: %s\n", comm.rank(), e.what());
    comm.abort(1);
  }
}
