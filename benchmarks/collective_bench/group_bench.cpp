#include "group_bench.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "balanced_order.hpp"

namespace mpitrain::bench {

void GroupBench::BlockStats::add(double block_seconds, int iters) {
  seconds += block_seconds;
  const double per_iter = block_seconds / iters;
  sum_sq += per_iter * per_iter;
  ++blocks;
}

// Returns the standard error of the mean per-iteration time, relative to that mean.
double GroupBench::BlockStats::rel_error(int iters_per_block) const {
  if (blocks < 2) return 1.0;
  const double mean = seconds / iters_per_block / blocks;
  const double var = std::max(0.0, (sum_sq - blocks * mean * mean) / (blocks - 1));
  return std::sqrt(var / blocks) / mean;
}

GroupBench::GroupBench(const Communicator& comm, const CollectiveDescriptor& collective,
                       const std::vector<std::string>& algos, Placement placement,
                       std::size_t shared_capacity)
    : comm_(comm), collective_(collective), algos_(algos), placement_(placement) {
  for (const std::string& a : algos_) runners_.push_back(collective_.runner(comm_, a));
  if (placement_.shared) shared_memory_ = comm_.allocate_shared(shared_capacity);
}

namespace {

constexpr std::size_t kBufferAlignBytes = 64;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kBufferAlignBytes - 1) / kBufferAlignBytes * kBufferAlignBytes;
}

// Returns true when a rank's input lies inside the output (--in-place, where the collective
// has an in-place form; broadcast is in place always: its output is its input).
bool send_in_recv(const CollectiveDescriptor& collective, const Layout& layout, bool in_place) {
  return in_place && layout.recv_count > 0 && collective.in_place_offset(layout, 0).has_value();
}

}  // namespace

std::size_t GroupBench::bytes_needed(const CollectiveDescriptor& collective, std::size_t count,
                                     const std::vector<DType>& types, int nranks, bool in_place) {
  const Layout layout = collective.layout(std::max<std::size_t>(1, count), nranks);
  std::size_t bytes = 0;
  for (DType type : types) {
    const std::size_t esize = dtype_bytes(type);
    bytes += aligned(layout.recv_count * esize);
    if (!send_in_recv(collective, layout, in_place)) bytes += aligned(layout.send_count * esize);
  }
  return bytes;
}

std::vector<Row> GroupBench::run(std::size_t nominal_count, const std::vector<DType>& types,
                                 int iters, int warmup, bool check) {
  allocate_and_fill(nominal_count, types);
  // Rows of the group: type-major, the algorithms in their order (mpi first).
  cases_.clear();
  for (std::size_t t = 0; t < types.size(); ++t) {
    for (std::size_t a = 0; a < algos_.size(); ++a) cases_.push_back({t, a});
  }
  const double probe = warm_up_and_probe(warmup);
  const int block_iters_max =
      iters > 0 ? static_cast<int>(std::clamp(kBlockSeconds / probe, 1.0, double(iters)))
                : static_cast<int>(std::max(1.0, kBlockSeconds / probe));
  return rows_of(interleave(probe, block_iters_max, iters), check);
}

// send: this rank's input; recv: the output (none for a collective that works in place),
// each type's on 64-byte boundaries of one zero-filled block of private or shared memory.
void GroupBench::allocate_and_fill(std::size_t nominal_count, const std::vector<DType>& types) {
  const Layout layout = collective_.layout(std::max<std::size_t>(1, nominal_count), comm_.size());
  const std::size_t need =
      bytes_needed(collective_, nominal_count, types, comm_.size(), placement_.in_place);
  buffers_.clear();
  std::span<std::byte> memory;
  if (placement_.shared) {
    if (need > shared_memory_.bytes().size()) {
      throw std::logic_error("collective_bench: a group needs " + std::to_string(need) +
                             " bytes of shared memory, " +
                             std::to_string(shared_memory_.bytes().size()) + " were reserved");
    }
    memory = shared_memory_.bytes().first(need);
    std::memset(memory.data(), 0, memory.size());
  } else {
    private_memory_.clear();  // the previous group's memory goes first
    private_memory_.shrink_to_fit();
    // One spare cache line, so that the buffers start on 64-byte boundaries as shared ones do
    // (a vector's memory is only 16-byte aligned).
    private_memory_.assign(need + kBufferAlignBytes, std::byte{0});
    const auto base = reinterpret_cast<std::uintptr_t>(private_memory_.data());
    memory = std::span<std::byte>(private_memory_).subspan(aligned(base) - base, need);
  }
  std::size_t at = 0;
  const auto take = [&](std::size_t bytes) {
    const std::span<std::byte> part = memory.subspan(at, bytes);
    at += aligned(bytes);
    return part;
  };
  const bool inside = send_in_recv(collective_, layout, placement_.in_place);
  buffers_.resize(types.size());
  for (std::size_t t = 0; t < types.size(); ++t) {
    Buffers& b = buffers_[t];
    b.type = types[t];
    b.esize = dtype_bytes(b.type);
    b.layout = layout;
    b.recv = take(layout.recv_count * b.esize);
    b.send = inside ? b.recv.subspan(*collective_.in_place_offset(layout, comm_.rank()) * b.esize,
                                     layout.send_count * b.esize)
                    : take(layout.send_count * b.esize);
    collective_.fill(b, comm_.rank());
  }
}

// Warm-up (pages touched, connections set up), then a probe of the first type's MPI
// baseline. Returns its time per call, maximum over ranks (so every rank decides alike).
double GroupBench::warm_up_and_probe(int warmup) {
  for (const Case& c : cases_) {
    for (int k = 0; k < (warmup >= 0 ? warmup : kDefaultWarmup); ++k) execute(c);
  }
  comm_.barrier();
  const auto p0 = std::chrono::steady_clock::now();
  for (int k = 0; k < kProbeIters; ++k) execute(cases_.front());
  return std::max(1e-7, comm_.allreduce_value(seconds_since(p0), ReduceOp::max) / kProbeIters);
}

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
// Each block starts with the rank's output rewritten (rewrite_output).
GroupBench::Timings GroupBench::interleave(double probe, int block_iters_max, int iters) {
  const std::vector<std::size_t> walk = balanced_order(cases_.size());
  const double walk_seconds = probe * block_iters_max * static_cast<double>(walk.size());
  const int check_walks = static_cast<int>(std::max(1.0, kCheckSeconds / walk_seconds));
  Timings t{std::vector<BlockStats>(cases_.size()), std::vector<int>(cases_.size(), 0)};
  for (int w = 0;; ++w) {
    if (iters > 0 && t.done.front() >= iters) break;
    for (std::size_t c : walk) {
      const int block_iters =
          iters > 0 ? std::min(block_iters_max, iters - t.done[c]) : block_iters_max;
      if (block_iters == 0) continue;  // this row has its --iters (same on every rank)
      rewrite_output(cases_[c]);
      comm_.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < block_iters; ++k) execute(cases_[c]);
      t.stats[c].add(seconds_since(t0), block_iters);
      t.done[c] += block_iters;
    }
    if (iters > 0 || (w + 1) % check_walks != 0) continue;
    // Timed seconds only: the untimed rewrites of large outputs take about as long as a block.
    double timed = 0;
    double worst = 0;
    for (const BlockStats& st : t.stats) {
      timed += st.seconds;
      worst = std::max(worst, st.rel_error(block_iters_max));
    }
    const double per_case = timed / static_cast<double>(cases_.size());
    const bool more = per_case < kMinSeconds || t.done.front() < kMinIters ||
                      (worst > kTargetRelError && per_case < kMaxSeconds &&
                       t.done.front() < kMaxIters);
    if (comm_.allreduce_value(more ? 1 : 0, ReduceOp::max) == 0) break;
  }
  return t;
}

// Every rank writes its output buffer (zeros; in place, the input with it), untimed, so that a
// block starts from buffers this rank wrote last, as an application's are (a training step
// writes its gradients just before it reduces them), whatever row ran before. Without it a
// row inherits the previous row's cache state: after MPI's allreduce, whose peer read this
// rank's output through CMA, each first write to a line waits until the other core drops its
// copy. Measured 2026-11-28 at 2 ranks, f32, 1 MiB, with the VM's two cores 200 ns apart
// (different L3s): shm 148-166 us after MPI on the same buffers, 86-110 us after this
// rewrite; MPI 142-164 us either way (and 103-118 us for MPI, 61-76 for shm, either way, when
// the cores were 40-60 ns apart).
void GroupBench::rewrite_output(const Case& c) {
  const Buffers& b = buffers_[c.buffers];
  // Broadcast has no recv: its buffer (send) is the output on every rank but the root.
  const std::span<std::byte> output = b.recv.empty() ? b.send : b.recv;
  std::memset(output.data(), 0, output.size());
}

// Returns the rows of the group from its timings: time per iteration the mean over the
// iterations, maximum over ranks; vs_mpi against the mpi row of the same type (algos_
// starts with mpi).
std::vector<Row> GroupBench::rows_of(const Timings& timings, bool check) {
  std::vector<Row> rows;
  const double factor = collective_.bus_factor(comm_.size());
  for (std::size_t c = 0; c < cases_.size(); ++c) {
    const Buffers& b = buffers_[cases_[c].buffers];
    Row row;
    row.type = b.type;
    row.size = b.layout.count * b.esize;
    row.count = b.layout.count;
    row.algo = algos_[cases_[c].algo];
    const double t = comm_.allreduce_value(timings.stats[c].seconds, ReduceOp::max) / timings.done[c];
    row.time_us = t * 1e6;
    row.algbw = static_cast<double>(row.size) / t / 1e9;
    row.busbw = row.algbw * factor;
    if (check) row.wrong = verify(cases_[c]);
    rows.push_back(row);
  }
  for (std::size_t c = 0; c < cases_.size(); ++c) {
    rows[c].vs_mpi = rows[c].busbw / rows[c - cases_[c].algo].busbw;
  }
  return rows;
}

// Returns the number of wrong elements over all ranks after one fresh run of case c.
std::uint64_t GroupBench::verify(const Case& c) {
  Buffers& b = buffers_[c.buffers];
  std::memset(b.recv.data(), 0xff, b.recv.size());
  collective_.fill(b, comm_.rank());  // after: in place, the input lies inside recv
  execute(c);
  const std::uint64_t wrong = collective_.count_wrong(b, comm_.rank(), comm_.size());
  return static_cast<std::uint64_t>(
      comm_.allreduce_value(static_cast<std::int64_t>(wrong), ReduceOp::sum));
}

double GroupBench::seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace mpitrain::bench
