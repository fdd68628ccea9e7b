#pragma once
// CollectiveWatch: the deadline and desynchronisation machinery of one Communicator (internal
// to collectives/; the public side is collective_timeout.hpp and Communicator's options).
//
// Before each collective, enter() publishes its number in the node's shared segment, where
// peers read it without this rank's help (a stopped rank's last number stays readable), and
// folds the call (op, type, count, root, reduce, algorithm) into a running 64-bit fingerprint.
// Cost per collective: one store to shared memory and a few multiplications; in the debug
// mode, one allgather of a 128-byte record per collective on a communicator of its own.
//
// check_fingerprints() compares the fingerprints of the collectives issued since the last
// check across ranks: one allreduce (max) of two 64-bit words, h and ~h, on its own
// communicator (so a check never matches a collective of the program), which gives the
// largest and the smallest fingerprint at once; they are equal exactly when every rank issued
// the same sequence of calls. On one node it goes through the shared segment instead (each
// rank publishes its fingerprint, and reads its peers' once they published theirs: no MPI
// call, which the shm algorithms' steps would not progress). The Engine posts it at one
// optimizer step and completes it at the next, so no step waits for it (a mismatch surfaces
// one step later).
//
// expire() reports a wait past the deadline and ends the job (or throws): see
// collective_timeout.hpp for the message. Peers on other nodes cannot be observed (their
// numbers are in their node's segment) and are listed as such.

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "mpitrain/collectives/collective_timeout.hpp"
#include "mpitrain/collectives/detail/collective_args.hpp"

namespace mpitrain::detail {

struct CommContext;

class CollectiveWatch {
 public:
  TimeoutAction action = TimeoutAction::abort;
  bool debug = false;  // check every collective across ranks before it runs
  // The name of the code issuing collectives now (Communicator::CallSite); a string literal.
  std::atomic<const char*> site{nullptr};
  // Threads inside a collective of this communicator now (Communicator::waiting_for_peers).
  std::atomic<int> inside{0};

  // Records collective number `seq` (resolved algorithm `algo`) as it starts: publishes the
  // number, folds it into the fingerprint and, in the debug mode, checks it across ranks
  // (throws CollectiveMismatch on every rank when ranks differ).
  void enter(CommContext& ctx, const CollectiveArgs& a, std::string_view algo,
             std::uint64_t seq);
  // `op` of expire() for a check of this watch rather than a collective.
  static constexpr int kCheck = -1;
  // Reports that this rank waited `waited` in `what` ("allreduce(f32, 1024 elements) #57":
  // collective number `seq`, a Collective `op` as int, or kCheck for the check after `seq`)
  // with the ranks that did and did not arrive there, then ends the job
  // (TimeoutAction::abort) or throws CollectiveTimeout. Never returns.
  [[noreturn]] void expire(CommContext& ctx, const std::string& what, std::uint64_t seq, int op,
                           std::chrono::nanoseconds waited);
  // Compares the fingerprints since the last check across ranks (collective; `seq` is the
  // number of the last collective issued); throws CollectiveMismatch on every rank, naming
  // what each rank issued, when they differ. Starts a new fingerprint either way. `wait`
  // false: completes the comparison posted by the previous call (throwing for it) and posts
  // this one, to be completed by the next call (or drain()): nothing waits in between.
  void check_fingerprints(CommContext& ctx, std::uint64_t seq, bool wait);
  // Waits for a posted comparison, its result dropped (before the communicators are freed).
  void drain() noexcept;

  // Returns "allreduce(f32, 1024 elements)": the call as deadline reports name it.
  static std::string describe(const CollectiveArgs& a);

 private:
  // Allgathers `bytes` bytes per rank on ctx.check_comm within the deadline (past it,
  // expire(ctx, what, seq, op)).
  void exchange(CommContext& ctx, const void* mine, void* all, int bytes, std::uint64_t seq,
                int op, const std::string& what);
  // Returns the report's list of the ranks that did and did not reach `seq`.
  // `graced`: after the grace period, when a peer that entered the collective but has not
  // timed out too is stuck inside it.
  static std::string arrivals(const CommContext& ctx, std::uint64_t seq, int op, bool graced);
  // Returns when every rank of the node has reached `stage` of its report (see expire), or
  // after `at_most`.
  static void await_peers(const CommContext& ctx, std::uint64_t stage,
                          std::chrono::milliseconds at_most);
  void check_record(CommContext& ctx, const CollectiveArgs& a, std::string_view algo,
                    std::uint64_t seq);
  // Completes the posted comparison, if any (`seq`: the last collective issued now).
  void finish_check(CommContext& ctx, std::uint64_t seq);
  // finish_check on one node: waits until every rank published check checks_ in the shared
  // segment (within the deadline) and compares the fingerprints it reads there.
  void finish_shm_check(CommContext& ctx, std::uint64_t seq);

  // A posted comparison: its request, the words MPI reduces in place, and this rank's
  // (number of the last collective, collectives since the check before, fingerprint).
  struct PendingCheck {
    MPI_Request req = MPI_REQUEST_NULL;
    std::array<std::int64_t, 2> extremes{};
    std::array<std::uint64_t, 3> mine{};
    bool in_shm = false;  // published in the shared segment as check checks_
  };
  PendingCheck pending_;
  std::uint64_t checks_ = 0;  // checks published in the shared segment

  std::uint64_t fingerprint_ = 0;
  std::uint64_t since_check_ = 0;  // collectives folded into fingerprint_
  Collective last_op_ = Collective::barrier;  // of the last collective entered
};

}  // namespace mpitrain::detail
