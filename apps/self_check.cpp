#include "self_check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mpitrain/precision/bfloat16.hpp"
#include "mpitrain/precision/float16.hpp"

namespace mpitrain::app {
namespace {

using Clock = std::chrono::steady_clock;

// Input of rank r at index i: small integers, exact in every type; sums and averages are
// exact in fp32 (where 16-bit sums accumulate), so the result is the closed form rounded
// once to the element type.
float input(int r, std::size_t i) { return static_cast<float>((r + 1) * static_cast<int>(1 + i % 7)); }

// Returns the number of elements of `got` that differ from the closed form of `op` over `n`
// ranks of input(), rounded by `round` to the element type.
template <class Round>
std::size_t count_wrong(const std::vector<float>& got, int n, ReduceOp op, Round round) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double k = static_cast<double>(1 + i % 7);
    double expected = 0.0;
    switch (op) {
      case ReduceOp::sum: expected = k * n * (n + 1) / 2.0; break;
      case ReduceOp::avg: expected = k * (n + 1) / 2.0; break;
      case ReduceOp::max: expected = k * n; break;
      case ReduceOp::min: expected = k; break;
    }
    if (got[i] != round(static_cast<float>(expected))) ++wrong;
  }
  return wrong;
}

// Conversions between float and the element types the check runs in.
template <class T> T from_float(float x);
template <> float from_float<float>(float x) { return x; }
template <> bfloat16 from_float<bfloat16>(float x) { return to_bfloat16(x); }
template <> float16 from_float<float16>(float x) { return to_float16(x); }
float as_float(float x) { return x; }
float as_float(bfloat16 x) { return to_float(x); }
float as_float(float16 x) { return to_float(x); }

template <class T>
std::size_t check_allreduce(const Communicator& comm, std::size_t count, ReduceOp op,
                            std::string_view algo) {
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = from_float<T>(input(comm.rank(), i));
  comm.allreduce(std::span<T>(data), op, algo);
  std::vector<float> got(count);
  for (std::size_t i = 0; i < count; ++i) got[i] = as_float(data[i]);
  return count_wrong(got, comm.size(), op, [](float x) { return as_float(from_float<T>(x)); });
}

// Checks allreduce sum/avg/max in f32, bf16 and f16 through every algorithm that can run on
// this launch's layout, passing each row's wrong count to `report`. An algorithm the
// Communicator reports as unable to run on this layout (shm when the ranks span nodes,
// hierarchical on one node) is named as not run, with its reason, instead of ending the check
// on its refusal.
template <class Report>
void check_every_allreduce(const Communicator& comm, std::FILE* out, const Report& report) {
  const std::size_t counts[] = {0, 1, 7, 1000, 262147};
  for (std::string_view algo : algorithm_names(Collective::allreduce)) {
    if (const std::string why = comm.cannot_run(algo, Collective::allreduce, DType::f32,
                                                 ReduceOp::sum);
        !why.empty()) {
      if (comm.rank() == 0) {
        const std::string name = "allreduce " + std::string(algo);
        const std::size_t colon = why.rfind(": ");
        const std::string reason = colon == std::string::npos ? why : why.substr(colon + 2);
        std::fprintf(out, "  %-40s not run: %s\n", name.c_str(), reason.c_str());
      }
      continue;
    }
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      std::size_t bad32 = 0, bad_bf = 0, bad_h = 0;
      for (std::size_t n : counts) {
        bad32 += check_allreduce<float>(comm, n, op, algo);
        bad_bf += check_allreduce<bfloat16>(comm, n, op, algo);
        bad_h += check_allreduce<float16>(comm, n, op, algo);
      }
      const std::string name = "allreduce " + std::string(to_string(op)) + " " + std::string(algo);
      report(name + " f32", bad32);
      report(name + " bf16", bad_bf);
      report(name + " f16", bad_h);
    }
  }
}

}  // namespace

long long run_self_check(const Communicator& comm, std::FILE* out) {
  const bool main = comm.rank() == 0;
  std::int64_t wrong = 0;
  if (main) {
    std::fprintf(out, "# trainer check: %d rank%s on %d node%s\n# %-40s %s\n", comm.size(),
                 comm.size() == 1 ? "" : "s", comm.node_count(), comm.node_count() == 1 ? "" : "s",
                 "collective", "wrong");
  }
  const auto report = [&](const std::string& what, std::size_t bad) {
    const std::int64_t all = comm.allreduce_value(static_cast<std::int64_t>(bad), ReduceOp::sum);
    wrong += all;
    if (main) std::fprintf(out, "  %-40s %lld\n", what.c_str(), static_cast<long long>(all));
  };
  check_every_allreduce(comm, out, report);
  {
    std::size_t bad = 0;
    for (int root = 0; root < comm.size(); ++root) {
      std::vector<float> data(1001);
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = comm.rank() == root ? input(root, i) : -1.0f;
      comm.broadcast(std::span<float>(data), root);
      for (std::size_t i = 0; i < data.size(); ++i) bad += data[i] != input(root, i);
    }
    report("broadcast f32 (every root)", bad);
  }
  {
    std::vector<float> mine(333);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = input(comm.rank(), i);
    std::vector<float> all(mine.size() * static_cast<std::size_t>(comm.size()));
    comm.allgather(std::span<const float>(mine), std::span<float>(all));
    std::size_t bad = 0;
    for (int r = 0; r < comm.size(); ++r) {
      for (std::size_t i = 0; i < mine.size(); ++i) bad += all[static_cast<std::size_t>(r) * mine.size() + i] != input(r, i);
    }
    report("allgather f32", bad);
  }

  // Bandwidth: f32 allreduce, the engine's default beside plain MPI, busbw = 2 (n-1)/n * bytes / time.
  if (main) {
    std::fprintf(out, "#\n# %12s %10s %12s %12s %12s %8s\n", "size", "count", "time_us", "busbw_GB/s",
                 "mpi_GB/s", "vs_mpi");
  }
  const double factor = comm.size() > 1 ? 2.0 * (comm.size() - 1) / comm.size() : 1.0;
  for (std::size_t bytes = 1024; bytes <= (16u << 20); bytes *= 16) {
    const std::size_t count = bytes / sizeof(float);
    std::vector<float> data(count, 1.0f);
    double seconds[2] = {0.0, 0.0};
    const std::string_view algos[2] = {kDefaultAlgorithm, "mpi"};
    const int iters = bytes >= (1u << 20) ? 5 : 50;
    for (int a = 0; a < 2; ++a) {
      comm.allreduce(std::span<float>(data), ReduceOp::sum, algos[a]);  // warm-up
      comm.barrier();
      const auto t0 = Clock::now();
      for (int it = 0; it < iters; ++it) comm.allreduce(std::span<float>(data), ReduceOp::sum, algos[a]);
      const double local = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      seconds[a] = comm.allreduce_value(local, ReduceOp::max);
    }
    const double busbw = factor * static_cast<double>(bytes) / seconds[0] * 1e-9;
    const double mpi = factor * static_cast<double>(bytes) / seconds[1] * 1e-9;
    if (main) {
      std::fprintf(out, "  %12zu %10zu %12.1f %12.2f %12.2f %8.2f\n", bytes, count, seconds[0] * 1e6,
                   busbw, mpi, busbw / mpi);
    }
  }
  if (main) std::fprintf(out, "# %s: %lld wrong results\n", wrong == 0 ? "OK" : "FAILED", static_cast<long long>(wrong));
  return wrong;
}

}  // namespace mpitrain::app
