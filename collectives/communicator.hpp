#pragma once
// Communicator: a duplicated MPI communicator with typed, size_t-counted collectives.
//
// Every collective takes element counts as size_t; counts above 2^31 - 1 are split into
// pieces MPI can take, and count 0 is a valid no-op that still synchronises nothing.
// bf16 and f16 sums accumulate in fp32 and round once per combining step.
// Every MPI failure throws MpiError naming the call, the rank and the count (the communicator
// returns MPI errors instead of aborting); a root outside [0, size()) throws MpiError
// (MPI_ERR_ROOT) before MPI is called, and inconsistent buffer sizes throw
// std::invalid_argument naming the call and the rank.
// Collectives must be called by every rank of the communicator in the same order, with the
// same count, type and op, from one thread at a time (the CommStream worker, or the main
// thread). Counts that differ between ranks are the caller's error, as in MPI, and are not
// checked per call: MPI's algorithm may fail with MPI_ERR_TRUNCATE (MpiError), while shm and
// ring give wrong values without a word. check_collectives() names them after the fact (the
// Engine checks once per step) and the debug mode (MPITRAIN_DEBUG_COLLECTIVES=1) names the
// first call that differs, before it runs.
//
// Algorithms are chosen by name (collective.hpp lists them per collective); "default" lets
// the communicator choose per call from its AlgorithmSelection (algorithm_selection.hpp).
// A name that no algorithm of that collective has, or an algorithm that cannot run the call
// (shm across nodes, a nonblocking ring), throws std::invalid_argument naming the call, the
// rank and the reason, before anything is sent.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/collectives/algorithm_selection.hpp"
#include "mpitrain/collectives/collective.hpp"
#include "mpitrain/collectives/collective_timeout.hpp"
#include "mpitrain/collectives/dtype.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/collectives/request.hpp"
#include "mpitrain/collectives/shared_buffer.hpp"

namespace mpitrain {

namespace detail {
struct CollectiveArgs;
struct CommContext;
class Algorithm;
}  // namespace detail

class Communicator {
 public:
  // Duplicates MPI_COMM_WORLD of the given runtime (collective: every rank constructs one)
  // and finds the node layout. The destructor frees the MPI objects unless MPI is finalised.
  explicit Communicator(const MpiRuntime& runtime);
  // Duplicates the host's communicator given by its Fortran handle: MPI_Comm_c2f(comm) in C
  // and C++, the INTEGER handle in Fortran's `mpi` module, comm%MPI_VAL in `mpi_f08`. For an
  // HPC code that hands mpitrain a sub-communicator (MPI_Comm_split, ...). Collective over
  // that communicator. The host keeps ownership: mpitrain works on its own duplicate, so the
  // host may free its communicator as soon as this returns. A handle that names no
  // communicator (MPI_COMM_NULL's, or one outside the valid range) throws MpiError
  // (MPI_ERR_COMM) without calling a collective.
  Communicator(const MpiRuntime& runtime, std::int64_t fortran_handle);
  // Returns a communicator over this process alone: a duplicate of MPI_COMM_SELF (size 1,
  // rank 0, one node). Not collective over the world: a process makes one whenever it likes,
  // and its collectives involve no other process (benchmarks time a 1-rank engine inside a
  // multi-rank launch with it).
  static Communicator self(const MpiRuntime& runtime);
  ~Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept { return rank_; }
  // Returns the thread level of the MPI this communicator runs on (its runtime's): what a
  // user of the communicator may do from other threads (the Engine checks it, see
  // engine/thread_level_requirement.hpp).
  ThreadLevel thread_level() const noexcept { return thread_level_; }
  int size() const noexcept { return size_; }
  // Ranks on this node (MPI_Comm_split_type shared memory).
  int local_rank() const noexcept { return local_rank_; }
  int local_size() const noexcept { return local_size_; }
  // Number of nodes, and this node's index among them (ordered by the lowest world rank).
  int node_count() const noexcept { return node_count_; }
  int node_index() const noexcept { return node_index_; }

  // Returns the mean one-way time, in nanoseconds, in which local ranks 0 and 1 of a node pass
  // a cache line through the node's shared memory (2000 round trips), the largest over the
  // nodes, the same on every rank; nothing when no node has two ranks. Tens of nanoseconds:
  // the two cores share a last-level cache; 150 and more: different L3 caches (chiplets) or
  // sockets, where shared-memory collectives are slower (collective_bench prints it).
  // Collective (it issues a barrier and an allreduce); about a millisecond (two ranks on one
  // core: the scheduler's time instead). Past the timeout (set_timeout) a rank 0 or 1 whose
  // peer stopped reports it as a collective's timeout (timeout_action).
  std::optional<double> core_latency_ns() const;

  // Returns the number of collectives this communicator has issued (tests count them): one
  // per collective call (blocking or not), however many MPI calls it takes.
  std::uint64_t collectives_issued() const noexcept { return issued_.load(); }

  // Returns the name of the algorithm "default" runs for a blocking allreduce of this count,
  // type and op (never "default"). Every rank resolves the same way: the selection uses only
  // the arguments, size() and the selection table, which every rank holds alike.
  std::string_view default_allreduce_algorithm(std::size_t count, DType type,
                                               ReduceOp op) const;

  // Returns the name of the algorithm allreduce(std::span<float>, op, wire, "default") runs
  // for this count (fp32 values), wire type and op; as default_allreduce_algorithm.
  std::string_view default_wire_allreduce_algorithm(std::size_t count, DType wire,
                                                    ReduceOp op) const;

  // Returns a handle to `bytes` (rounded up to 64) of memory in the node's shared segment,
  // 64-byte aligned and zero-filled, at the same offset on every rank: a buffer allocated here
  // (the engine's gradient buckets) is read by peers in place by the shm algorithm (no copy
  // in). Collective over the node: every rank calls it with the same size, in the same order.
  // The handle's end releases the memory (shared_buffer.hpp); this call first returns to the
  // system the buffers every rank of the node has released, and the communicator's end the
  // rest. No other thread may be in a collective of this communicator meanwhile. Throws
  // std::logic_error after a timeout broke the node's segment.
  [[nodiscard]] SharedBuffer allocate_shared(std::size_t bytes) const;
  // Returns the bytes of this rank's shared memory from allocate_shared now mapped: each
  // buffer rounded up to whole pages, released ones that the next allocate_shared returns
  // included.
  std::size_t shared_bytes_mapped() const noexcept;

  // ---- deadlines and desynchronisation (collective_timeout.hpp, DESIGN.md section 2) ----
  // Sets how long a rank waits for its peers in any one wait of a collective (each MPI call,
  // each ring message, each shared-memory stage, Request::wait, and so the CommStream worker)
  // before it reports what it waits in and which ranks did not arrive, then ends the job or
  // throws CollectiveTimeout (set_timeout_action). Zero, the default: no limit, and the waits
  // are those of before (blocking MPI calls, MPI_Waitall). With a limit, a blocking MPI call
  // becomes its nonblocking twin polled with MPI_Testall against the deadline (a blocking MPI
  // call cannot be interrupted). Every rank should set the same value.
  void set_timeout(std::chrono::nanoseconds timeout) const noexcept;
  std::chrono::nanoseconds timeout() const noexcept;
  // What a rank does when a wait passes the timeout: TimeoutAction::abort (the default).
  void set_timeout_action(TimeoutAction action) const noexcept;
  TimeoutAction timeout_action() const noexcept;
  // Debug mode: every collective is compared across ranks before it runs (one allgather of
  // 128 bytes per collective, on an internal communicator), and the first that differs throws
  // CollectiveMismatch on every rank, naming both calls, their numbers and their call sites
  // (CallSite). On from construction when the environment variable
  // MPITRAIN_DEBUG_COLLECTIVES is 1. Every rank must set the same value.
  void set_debug_collectives(bool on) const noexcept;
  bool debug_collectives() const noexcept;
  // Compares across ranks a fingerprint of the collectives issued since the last check (op,
  // type, count, root, reduction, algorithm, in order): one allreduce of 16 bytes on an
  // internal communicator, not counted in collectives_issued(). Collective. Throws
  // CollectiveMismatch on every rank, naming what each rank issued, when they differ.
  // `wait` false posts the comparison and returns; the next call completes it first (and
  // throws for it), so nothing waits: the Engine does so once per optimizer step, and a
  // mismatch surfaces one step later.
  void check_collectives(bool wait = true) const;
  // Returns true while a thread of this process is inside a collective of this communicator
  // that has a deadline: a watchdog defers to the collective's report, which names the rank
  // that did not arrive.
  bool waiting_for_peers() const noexcept;
  // Names the code issuing collectives on this communicator while it lives (debug-mode
  // reports: "... #57 from Engine::backward"). `name` must outlive it (a string literal).
  // Set it on the thread that runs the collectives (inside a CommStream task for those).
  class CallSite {
   public:
    CallSite(const Communicator& comm, const char* name) noexcept;
    ~CallSite();
    CallSite(const CallSite&) = delete;
    CallSite& operator=(const CallSite&) = delete;

   private:
    const Communicator& comm_;
    const char* previous_;
  };

  // Returns why the algorithm named `algo` cannot run `op` of `type` (and `reduce`) on this
  // communicator, or an empty string when it can (tests and self-checks skip such pairs).
  std::string cannot_run(std::string_view algo, Collective op, DType type,
                         ReduceOp reduce = ReduceOp::sum) const;

  // The rules "default" resolves by: AlgorithmSelection::builtin(), or the table file named by
  // the environment variable MPITRAIN_ALGORITHM_TABLE when the communicator is constructed
  // (every rank loads it; ranks that fail or disagree make the constructor throw on every
  // rank). Every rank must set the same table.
  const AlgorithmSelection& algorithm_selection() const noexcept { return selection_; }
  // Loads the table file `path` (AlgorithmSelection::load) on every rank and uses it.
  // Collective; throws std::runtime_error on every rank, naming each rank that could not load
  // it or holds a different table.
  void use_algorithm_table(const std::string& path);
  void set_algorithm_selection(AlgorithmSelection selection) { selection_ = std::move(selection); }

  // Returns the largest element count handed to one MPI call (INT_MAX unless lowered).
  // Longer buffers are split into pieces of at most this many elements.
  std::size_t max_call_count() const noexcept;
  // Lowers the largest count per MPI call (clamped to [1, INT_MAX]). Tests use it to run
  // the splitting paths for counts above 2^31 - 1 with small buffers. Every rank must set
  // the same value.
  void set_max_call_count(std::size_t count) noexcept;

  // Aborts every process of the job (MPI_Abort) with `error_code`; for a rank that cannot
  // continue while its peers wait in a collective. Does not return.
  [[noreturn]] void abort(int error_code) const noexcept;

  void barrier() const;

  // ---- type-erased core: counts in elements of `type` -------------------------------------
  void broadcast(void* data, std::size_t count, DType type, int root,
                 std::string_view algo = kDefaultAlgorithm) const;
  // send == recv is in place (otherwise they must not overlap). AVG divides the sum by size()
  // (integers: truncating division; bf16/f16: in fp32 before the final rounding).
  void allreduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                 std::string_view algo = kDefaultAlgorithm) const;
  // send holds size() * recv_count elements; rank r receives block r, reduced. send and recv
  // must not overlap.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op, std::string_view algo = kDefaultAlgorithm) const;
  // recv holds size() * send_count elements, block r from rank r. In place when send is
  // block rank() of recv.
  void allgather(const void* send, void* recv, std::size_t send_count, DType type,
                 std::string_view algo = kDefaultAlgorithm) const;
  // recv_counts[r] elements from rank r, packed in rank order into recv. recv_counts must be
  // the same on every rank, with size() entries and recv_counts[rank()] == send_count.
  void allgatherv(const void* send, std::size_t send_count, void* recv,
                  std::span<const std::size_t> recv_counts, DType type) const;
  // Like allgather, but only `root` receives (recv may be empty elsewhere).
  void gather(const void* send, void* recv, std::size_t send_count, DType type, int root) const;

  // ---- fp32 data, 16-bit wire format ------------------------------------------------------
  // Allreduces the fp32 values of `data` in place, sending them as `wire`. f32 is the plain
  // allreduce above. For bf16 and f16 the result is, bit for bit, what converting `data` to
  // `wire`, allreduce(...) of that 16-bit buffer with `algo` ("default" resolved by
  // default_wire_allreduce_algorithm) and converting back give (a sum that meets two NaNs is
  // a quiet NaN either way, whose payload may come from either):
  //   ring  the fused ring (collectives/wire_ring_allreduce.hpp): same messages, same
  //         roundings as the 16-bit ring, but no conversion pass over the whole buffer (each
  //         rank rounds its values inside the combining loop and widens results as they
  //         arrive), so it costs about what the 16-bit ring costs;
  //   mpi   converts into 16-bit scratch, calls MPI_Allreduce (our fp32-combining user ops;
  //         avg: fp32 sums of the rounded values, divided before the final rounding), and
  //         converts back: two extra passes over the buffer.
  // `scratch` holds at least data.size() 16-bit values for the call to use (a caller that
  // reduces the same buffers again and again keeps them); empty: the call allocates its own.
  // Throws std::invalid_argument for another wire type or a short scratch.
  //
  // Returns, besides, whether every value of the result is finite when the algorithm found
  // out on the way at no extra pass over the buffer, std::nullopt when it did not look (then a
  // caller that needs to know reads the values itself). Today that is `shm` on an f32 wire,
  // at 2 ranks or more, for 2 KiB or more, with `data` in the node's shared segment
  // (allocate_shared) at the same offset on every rank: each rank checks the part it
  // combined while it is in cache, and every rank gets the same answer.
  std::optional<bool> allreduce(std::span<float> data, ReduceOp op, DType wire,
                                std::string_view algo = kDefaultAlgorithm,
                                std::span<std::uint16_t> scratch = {}) const;

  // Nonblocking forms: same arguments and results as the blocking calls; the buffers must
  // stay untouched until the Request completes. Each posts MPI's nonblocking collectives
  // (MPI_Iallreduce, ...), which MPI progresses whenever this rank is inside MPI, and which
  // may complete in any order.
  //
  // iallreduce runs the algorithms that have a nonblocking form (mpi, reduce_bcast); "default"
  // picks among those only (MPI's algorithm for every type, 16-bit ones included), and ring
  // throws std::invalid_argument before anything is posted. Why: the ring is 2(n-1) dependent rounds
  // of point-to-point messages, each posted after the previous one arrived and was combined.
  // MPI knows nothing of that schedule, so a nonblocking ring could only advance inside its
  // own Request::test()/wait(): a rank blocked in another collective, or waiting on another
  // request first, would stop its neighbours' rings, which MPI's nonblocking collectives
  // allow and a user-level ring would turn into a deadlock. The ring overlaps compute the
  // other way: CommStream runs the blocking allreduce (ring included) on its worker thread.
  Request ibarrier() const;
  Request ibroadcast(void* data, std::size_t count, DType type, int root) const;
  Request iallreduce(const void* send, void* recv, std::size_t count, DType type, ReduceOp op,
                     std::string_view algo = kDefaultAlgorithm) const;
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                          ReduceOp op) const;
  Request iallgather(const void* send, void* recv, std::size_t send_count, DType type) const;
  // recv_counts is copied: the span need not outlive the call.
  Request iallgatherv(const void* send, std::size_t send_count, void* recv,
                      std::span<const std::size_t> recv_counts, DType type) const;
  Request igather(const void* send, void* recv, std::size_t send_count, DType type,
                  int root) const;

  // ---- typed front ends ----------------------------------------------------------------------
  template <class T> void broadcast(std::span<T> data, int root) const {
    broadcast(data.data(), data.size(), dtype_of_v<T>, root);
  }
  template <class T>
  void allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op,
                 std::string_view algo = kDefaultAlgorithm) const {
    require_equal_sizes("allreduce", send.size(), recv.size());
    allreduce(send.data(), recv.data(), recv.size(), dtype_of_v<T>, op, algo);
  }
  template <class T>
  void allreduce(std::span<T> data, ReduceOp op,
                 std::string_view algo = kDefaultAlgorithm) const {
    allreduce(data.data(), data.data(), data.size(), dtype_of_v<T>, op, algo);
  }
  template <class T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) const {
    require_equal_sizes("reduce_scatter", send.size(), recv.size() * static_cast<std::size_t>(size_));
    reduce_scatter(send.data(), recv.data(), recv.size(), dtype_of_v<T>, op);
  }
  template <class T> void allgather(std::span<const T> send, std::span<T> recv) const {
    require_equal_sizes("allgather", send.size() * static_cast<std::size_t>(size_), recv.size());
    allgather(send.data(), recv.data(), send.size(), dtype_of_v<T>);
  }
  template <class T>
  void allgatherv(std::span<const T> send, std::span<T> recv,
                  std::span<const std::size_t> recv_counts) const {
    allgatherv(send.data(), send.size(), recv.data(), recv_counts, dtype_of_v<T>);
  }
  template <class T> void gather(std::span<const T> send, std::span<T> recv, int root) const {
    gather(send.data(), recv.data(), send.size(), dtype_of_v<T>, root);
  }
  // Returns the value reduced over all ranks.
  template <class T> T allreduce_value(T value, ReduceOp op) const {
    T out{};
    allreduce(&value, &out, 1, dtype_of_v<T>, op);
    return out;
  }
  // Returns every rank's value, indexed by rank.
  template <class T> std::vector<T> allgather_value(T value) const {
    std::vector<T> out(static_cast<std::size_t>(size_));
    allgather(&value, out.data(), 1, dtype_of_v<T>);
    return out;
  }

  // Returns every rank's `text`, indexed by rank (texts of any length, empty included): one
  // allgather of the lengths and one allgatherv of the bytes. Collective.
  std::vector<std::string> allgather_strings(std::string_view text) const;

 private:
  // Runs `args` with the algorithm named `algo` (counted in collectives_issued()).
  void run(const detail::CollectiveArgs& args, std::string_view algo) const;
  // Starts `args` with the algorithm named `algo` (counted in collectives_issued()).
  Request post(const detail::CollectiveArgs& args, std::string_view algo) const;
  // Returns the algorithm `algo` names for `args` ("default" resolved); throws
  // std::invalid_argument naming the call, the rank and why when none can run it.
  const detail::Algorithm& resolve(const detail::CollectiveArgs& args, std::string_view algo,
                                   bool nonblocking) const;
  // Throws std::invalid_argument naming the call and both sizes when they differ.
  void require_equal_sizes(std::string_view call, std::size_t expected, std::size_t got) const;

  std::unique_ptr<detail::CommContext> ctx_;  // the MPI objects
  AlgorithmSelection selection_ = AlgorithmSelection::builtin();
  int rank_ = 0;
  int size_ = 1;
  ThreadLevel thread_level_ = ThreadLevel::single;
  int local_rank_ = 0;
  int local_size_ = 1;
  int node_count_ = 1;
  int node_index_ = 0;
  mutable std::atomic<std::uint64_t> issued_{0};
};

}  // namespace mpitrain
