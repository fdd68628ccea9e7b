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
// the same sequence of calls.
//
// expire() reports a wait past the deadline and ends the job (or throws): see
// collective_timeout.hpp for the message. Peers on other nodes cannot be observed (their
// numbers are in their node's segment) and are listed as such.

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
  // what each rank issued, when they differ. Starts a new fingerprint either way.
  void check_fingerprints(CommContext& ctx, std::uint64_t seq);

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

  std::uint64_t fingerprint_ = 0;
  std::uint64_t since_check_ = 0;  // collectives folded into fingerprint_
  Collective last_op_ = Collective::barrier;  // of the last collective entered
};

}  // namespace mpitrain::detail
