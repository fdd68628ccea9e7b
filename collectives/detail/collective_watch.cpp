// CollectiveWatch (see collective_watch.hpp): progress numbers, fingerprints, the debug
// mode's per-call check, and the deadline report.

#include "mpitrain/collectives/detail/collective_watch.hpp"

#include <mpi.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "mpitrain/collectives/detail/bounded_wait.hpp"
#include "mpitrain/collectives/detail/comm_context.hpp"
#include "mpitrain/collectives/detail/shm_segment.hpp"

namespace mpitrain::detail {
namespace {

// How long a rank that timed out waits, before MPI_Abort, for its peers to print their own
// reports: those waiting in the same collective expire within milliseconds of it (each
// polls its own deadline); a rank that did not arrive may still speak too (a trainer's
// watchdog naming what it is stuck in, checked once a second).
constexpr std::chrono::milliseconds kReportGrace{2000};
// How long a rank that printed its report waits for the others that timed out to print.
constexpr std::chrono::milliseconds kPrintGrace{1000};
// Stages of a timed-out rank, in its "reported" word of the shared segment.
constexpr std::uint64_t kTimedOut = 1;
constexpr std::uint64_t kPrinted = 2;
constexpr std::uint8_t kNoWire = 0xff;

// A rank's published progress word: the number of the collective it entered last (bits 16
// and up), that collective's op + 1 (bits 8-15), and whether it is in a check of this watch
// after that collective (bit 0).
struct Progress {
  std::uint64_t seq = 0;
  int op = -1;  // Collective, or -1 before the first
  bool in_check = false;

  static std::uint64_t word(std::uint64_t seq, Collective op, bool in_check) noexcept {
    return seq << 16 | (static_cast<std::uint64_t>(op) + 1) << 8 | (in_check ? 1u : 0u);
  }
  static Progress of(std::uint64_t w) noexcept {
    return {w >> 16, static_cast<int>((w >> 8) & 0xff) - 1, (w & 1u) != 0};
  }
};

// Returns what a peer at `p` did instead of arriving at collective `seq` (op `op`, or kCheck:
// the check after it), or "" when it arrived.
std::string lateness(const Progress& p, std::uint64_t seq, int op) {
  if (op == CollectiveWatch::kCheck) {
    if (p.in_check && p.seq == seq) return "";
    if (p.seq > seq) return fmt::format("went on to #{}", p.seq);
  } else {
    if (p.seq > seq || (p.seq == seq && p.op == op && !p.in_check)) return "";
    if (p.seq == seq) {
      return fmt::format("called {} as #{}", to_string(static_cast<Collective>(p.op)), p.seq);
    }
  }
  if (p.in_check) return fmt::format("last seen in the fingerprint check after #{}", p.seq);
  return fmt::format("last seen at #{}", p.seq);
}

// Returns h with v folded in (boost's hash_combine with a 64-bit constant): order-sensitive.
std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

// Returns the count every rank gives alike: an allgatherv's total (each rank sends its own
// count), else the call's count.
std::uint64_t common_count(const CollectiveArgs& a) noexcept {
  if (a.op != Collective::allgatherv) return a.count;
  std::uint64_t total = 0;
  for (std::size_t c : a.recv_counts) total += c;
  return total;
}

bool has_root(Collective op) noexcept {
  return op == Collective::broadcast || op == Collective::gather;
}
bool has_reduce(Collective op) noexcept {
  return op == Collective::allreduce || op == Collective::reduce_scatter;
}

// One rank's collective as the debug mode compares it: 128 bytes, allgathered before the call.
struct CallRecord {
  std::uint64_t seq = 0;
  std::uint64_t count = 0;
  std::int32_t root = 0;
  std::uint8_t op = 0;
  std::uint8_t type = 0;
  std::uint8_t wire = kNoWire;
  std::uint8_t reduce = 0;
  std::array<char, 24> algo{};
  std::array<char, 80> site{};
};
static_assert(sizeof(CallRecord) == 128);

// Copies `text` into `out`, cut to fit with a terminating zero.
template <std::size_t N> void copy_text(std::array<char, N>& out, std::string_view text) {
  const std::size_t n = std::min(text.size(), N - 1);
  // An empty string_view may hold a null pointer, which memcpy must never be given.
  if (n > 0) std::memcpy(out.data(), text.data(), n);
  out[n] = '\0';
}

// Returns "allreduce(f32, 1024)", "barrier", "broadcast(f32, 10, root 0)"; `full` adds the
// reduction and the algorithm: "allreduce(f32, 1024, sum, ring)".
std::string describe_record(const CallRecord& r, bool full) {
  const auto op = static_cast<Collective>(r.op);
  if (op == Collective::barrier) return full ? fmt::format("barrier({})", r.algo.data()) : "barrier";
  std::string type(to_string(static_cast<DType>(r.type)));
  if (r.wire != kNoWire) type += fmt::format(" as {}", to_string(static_cast<DType>(r.wire)));
  std::string text = fmt::format("{}({}, {}", to_string(op), type, r.count);
  if (has_root(op)) text += fmt::format(", root {}", r.root);
  if (full && has_reduce(op)) text += fmt::format(", {}", to_string(static_cast<ReduceOp>(r.reduce)));
  if (full) text += fmt::format(", {}", r.algo.data());
  return text + ")";
}

// Returns true when two ranks' records name the same call (numbers and call sites aside).
bool same_call(const CallRecord& a, const CallRecord& b) {
  const auto op = static_cast<Collective>(a.op);
  return a.op == b.op && a.type == b.type && a.wire == b.wire && a.count == b.count &&
         (!has_root(op) || a.root == b.root) && (!has_reduce(op) || a.reduce == b.reduce) &&
         std::strcmp(a.algo.data(), b.algo.data()) == 0;
}

std::string site_name(const CallRecord& r) {
  return r.site[0] != '\0' ? std::string(r.site.data()) : std::string("an unnamed call site");
}

// Counts a thread waiting for peers in `count` while it lives.
class Counted {
 public:
  explicit Counted(std::atomic<int>& count) noexcept : count_(count) {
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  ~Counted() { count_.fetch_sub(1, std::memory_order_relaxed); }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;

 private:
  std::atomic<int>& count_;
};

// Returns "rank 1" or "ranks 1, 3".
std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

}  // namespace

std::string CollectiveWatch::describe(const CollectiveArgs& a) {
  if (a.op == Collective::barrier) return "barrier";
  std::string type(to_string(a.type));
  if (a.has_wire()) type += fmt::format(" as {}", to_string(*a.wire));
  std::string text = fmt::format("{}({}, {} element{}", to_string(a.op), type, a.count,
                                 a.count == 1 ? "" : "s");
  if (has_root(a.op)) text += fmt::format(", root {}", a.root);
  return text + ")";
}

void CollectiveWatch::enter(CommContext& ctx, const CollectiveArgs& a, std::string_view algo,
                            std::uint64_t seq) {
  ctx.shm->publish_progress(Progress::word(seq, a.op, false));
  last_op_ = a.op;
  std::uint64_t h = mix(fingerprint_, static_cast<std::uint64_t>(a.op) |
                                          static_cast<std::uint64_t>(a.sent_type()) << 8 |
                                          static_cast<std::uint64_t>(a.reduce) << 16 |
                                          static_cast<std::uint64_t>(a.has_wire()) << 24 |
                                          static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.root)) << 32);
  h = mix(h, common_count(a));
  for (char c : algo) h = mix(h, static_cast<unsigned char>(c));
  fingerprint_ = h;
  ++since_check_;
  if (debug) check_record(ctx, a, algo, seq);
}

void CollectiveWatch::check_record(CommContext& ctx, const CollectiveArgs& a,
                                   std::string_view algo, std::uint64_t seq) {
  CallRecord mine;
  mine.seq = seq;
  mine.count = common_count(a);
  mine.root = a.root;
  mine.op = static_cast<std::uint8_t>(a.op);
  mine.type = static_cast<std::uint8_t>(a.type);
  mine.wire = a.has_wire() ? static_cast<std::uint8_t>(*a.wire) : kNoWire;
  mine.reduce = static_cast<std::uint8_t>(a.reduce);
  copy_text(mine.algo, algo);
  const char* where = site.load(std::memory_order_relaxed);
  copy_text(mine.site, where != nullptr ? std::string_view(where) : std::string_view());
  std::vector<CallRecord> all(static_cast<std::size_t>(ctx.size));
  exchange(ctx, &mine, all.data(), sizeof(CallRecord), seq, static_cast<int>(a.op),
           fmt::format("collective check before {} #{}", describe(a), seq));
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (same_call(all[r], all[0])) continue;
    const bool full = describe_record(all[r], false) == describe_record(all[0], false);
    throw CollectiveMismatch(fmt::format(
        "collective mismatch: rank {} called {} #{} from {}, rank 0 called {} #{} from {}", r,
        describe_record(all[r], full), all[r].seq, site_name(all[r]),
        describe_record(all[0], full), all[0].seq, site_name(all[0])));
  }
}

void CollectiveWatch::check_fingerprints(CommContext& ctx, std::uint64_t seq, bool wait) {
  finish_check(ctx, seq);
  // Post the comparison of the fingerprint since the last check; it runs while the caller
  // goes on unless `wait`. One node: the values go to the shared segment, where the next
  // call reads the peers' (no MPI call: an MPI request would progress only inside MPI, and
  // the shm algorithms make none). Several nodes: a nonblocking allreduce.
  pending_.mine = {seq, since_check_, fingerprint_};
  fingerprint_ = 0;
  since_check_ = 0;
  if (ctx.node_count == 1) {
    ctx.shm->publish_check(++checks_, pending_.mine);
    pending_.in_shm = true;
  } else {
    const auto h = static_cast<std::int64_t>(pending_.mine[2]);
    pending_.extremes = {h, ~h};  // max of both: the largest and ~(smallest)
    ctx.check(MPI_Iallreduce(MPI_IN_PLACE, pending_.extremes.data(), 2, MPI_INT64_T, MPI_MAX,
                             ctx.check_comm, &pending_.req),
              "MPI_Iallreduce (collective check)", 2);
  }
  if (wait) finish_check(ctx, seq);
}

namespace {

// Returns the CollectiveMismatch text for every rank's (last collective, collectives since the
// check before, fingerprint).
std::string fingerprint_mismatch(const std::vector<std::array<std::uint64_t, 3>>& all) {
  std::string text = "collective mismatch: the ranks issued different collectives since the last check:";
  for (std::size_t r = 0; r < all.size(); ++r) {
    text += fmt::format("{} rank {} issued {} up to #{} (fingerprint {:016x})", r ? "," : "", r,
                        all[r][1], all[r][0], all[r][2]);
  }
  return text + "; set MPITRAIN_DEBUG_COLLECTIVES=1 to name the first collective that differs";
}

}  // namespace

void CollectiveWatch::finish_shm_check(CommContext& ctx, std::uint64_t seq) {
  pending_.in_shm = false;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  ctx.shm->publish_progress(Progress::word(seq, last_op_, true));
  const Counted waiting(inside);
  std::vector<std::array<std::uint64_t, 3>> all(static_cast<std::size_t>(ctx.size));
  bool differ = false;
  for (int r = 0; r < ctx.size; ++r) {
    const int peer = ctx.node_rank_of[static_cast<std::size_t>(r)];
    // Bounded: what is left of the timeout (at least a nanosecond: zero means no limit).
    const auto left = ctx.timeout.count() > 0
                          ? std::max<std::chrono::nanoseconds>(ctx.timeout - (Clock::now() - start),
                                                               std::chrono::nanoseconds(1))
                          : std::chrono::nanoseconds(0);
    if (!ctx.shm->wait_check_index(peer, checks_, left)) {
      expire(ctx, fmt::format("fingerprint check after #{}", pending_.mine[0]), seq, kCheck,
             Clock::now() - start);
    }
    all[static_cast<std::size_t>(r)] = ctx.shm->check_values(peer, checks_);
    differ = differ || all[static_cast<std::size_t>(r)][2] != pending_.mine[2];
  }
  ctx.shm->publish_progress(Progress::word(seq, last_op_, false));
  if (differ) throw CollectiveMismatch(fingerprint_mismatch(all));
}

void CollectiveWatch::finish_check(CommContext& ctx, std::uint64_t seq) {
  if (pending_.in_shm) return finish_shm_check(ctx, seq);
  if (pending_.req == MPI_REQUEST_NULL) return;
  const std::uint64_t checked = pending_.mine[0];
  const std::string what = fmt::format("fingerprint check after #{}", checked);
  ctx.shm->publish_progress(Progress::word(seq, last_op_, true));
  {
    const Counted waiting(inside);
    try {
      ctx.check(wait_requests(&pending_.req, 1, ctx.timeout), "MPI_Wait (collective check)", 2);
    } catch (const WaitExpired& e) {
      expire(ctx, what, seq, kCheck, e.waited());
    }
  }
  if (pending_.extremes[0] == ~pending_.extremes[1]) {
    ctx.shm->publish_progress(Progress::word(seq, last_op_, false));
    return;
  }
  std::vector<std::array<std::uint64_t, 3>> all(static_cast<std::size_t>(ctx.size));
  exchange(ctx, pending_.mine.data(), all.data(), sizeof(pending_.mine), seq, kCheck, what);
  throw CollectiveMismatch(fingerprint_mismatch(all));
}

void CollectiveWatch::drain() noexcept {
  if (pending_.req != MPI_REQUEST_NULL) MPI_Wait(&pending_.req, MPI_STATUS_IGNORE);
}

void CollectiveWatch::exchange(CommContext& ctx, const void* mine, void* all, int bytes,
                               std::uint64_t seq, int op, const std::string& what) {
  MPI_Request req = MPI_REQUEST_NULL;
  ctx.check(MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, ctx.check_comm, &req),
            "MPI_Iallgather (collective check)", static_cast<std::size_t>(bytes));
  const Counted waiting(inside);
  try {
    ctx.check(wait_requests(&req, 1, ctx.timeout), "MPI_Wait (collective check)",
              static_cast<std::size_t>(bytes));
  } catch (const WaitExpired& e) {
    expire(ctx, what, seq, op, e.waited());
  }
}

std::string CollectiveWatch::arrivals(const CommContext& ctx, std::uint64_t seq, int op,
                                      bool graced) {
  std::string missing;
  std::vector<int> arrived;
  std::vector<int> elsewhere;
  for (int r = 0; r < ctx.size; ++r) {
    const int node_rank = ctx.node_rank_of[static_cast<std::size_t>(r)];
    if (node_rank < 0) {
      elsewhere.push_back(r);
      continue;
    }
    const std::string late =
        r == ctx.rank ? std::string()
                      : lateness(Progress::of(ctx.shm->progress(node_rank)), seq, op);
    const std::string sep = missing.empty() ? "" : "; ";
    if (!late.empty()) {
      missing += fmt::format("{}rank {} did not arrive ({})", sep, r, late);
    } else if (graced && r != ctx.rank && ctx.shm->reported(node_rank) == 0) {
      // It entered this collective but did not time out in it with the others: it is not
      // waiting for anyone, it stopped (or computes for longer than the deadline) inside.
      missing += fmt::format("{}rank {} stopped responding inside #{}", sep, r, seq);
    } else {
      arrived.push_back(r);
    }
  }
  std::string text = missing.empty() ? "every rank on this node arrived" : missing;
  if (!arrived.empty()) text += "; arrived: " + ranks_text(arrived);
  if (!elsewhere.empty()) text += "; not observable (other nodes): " + ranks_text(elsewhere);
  return text;
}

void CollectiveWatch::expire(CommContext& ctx, const std::string& what, std::uint64_t seq,
                             int op, std::chrono::nanoseconds waited) {
  ctx.broken = true;
  inside.fetch_add(1, std::memory_order_relaxed);  // for good: this report is the rank's word
  // The configured deadline, as the user set it ("after 10 s"); `waited` exceeds it by the
  // polling granularity (milliseconds).
  const double limit = std::chrono::duration<double>(std::min(ctx.timeout, waited)).count();
  const auto report = [&](bool graced) {
    return fmt::format("rank {}: {} timed out after {:g} s: {}", ctx.rank, what, limit,
                       arrivals(ctx, seq, op, graced));
  };
  if (action == TimeoutAction::throw_error) throw CollectiveTimeout(report(false));
  // Stage 1: this rank timed out. Peers waiting in the same collective time out within
  // milliseconds; one that entered it but never times out is stuck inside (stopped, say).
  ctx.shm->mark_reported(kTimedOut);
  await_peers(ctx, kTimedOut, kReportGrace);
  // On a terminal the report starts a line of its own: a progress line may be drawn there.
  fmt::print(stderr, "{}mpitrain: {}; ending the job (MPI_Abort)\n", isatty(STDERR_FILENO) ? "\n" : "",
             report(true));
  std::fflush(stderr);
  // Stage 2: printed. The first rank to call MPI_Abort ends every process, so each waits
  // (briefly) for the others that timed out to have printed too.
  ctx.shm->mark_reported(kPrinted);
  await_peers(ctx, kPrinted, kPrintGrace);
  MPI_Abort(ctx.comm, 1);
  std::abort();  // MPI_Abort does not return
}

void CollectiveWatch::await_peers(const CommContext& ctx, std::uint64_t stage,
                                  std::chrono::milliseconds at_most) {
  const auto until = std::chrono::steady_clock::now() + at_most;
  for (int r = 0; r < ctx.size; ++r) {
    const int node_rank = ctx.node_rank_of[static_cast<std::size_t>(r)];
    if (node_rank < 0) continue;
    // Stage 2 waits only for the ranks that reached stage 1.
    if (stage == kPrinted && ctx.shm->reported(node_rank) < kTimedOut) continue;
    while (ctx.shm->reported(node_rank) < stage && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

}  // namespace mpitrain::detail
