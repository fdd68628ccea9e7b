// Communicator: typed, size_t-counted collectives over a duplicate of MPI_COMM_WORLD (or of a
// communicator the host hands in), dispatched by name through the table of algorithms
// (detail/algorithm_registry.cpp). Which algorithm "default" runs is the AlgorithmSelection's
// business (algorithm_selection.cpp gives the measured rules); how each algorithm runs is
// its own file's.

#include "mpitrain/collectives/communicator.hpp"

#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/detail/algorithm_registry.hpp"
#include "mpitrain/collectives/detail/bounded_wait.hpp"
#include "mpitrain/collectives/detail/collective_args.hpp"
#include "mpitrain/collectives/detail/comm_context.hpp"
#include "mpitrain/collectives/detail/core_latency.hpp"
#include "mpitrain/collectives/detail/request_state.hpp"
#include "mpitrain/collectives/detail/scoped_errors_return.hpp"
#include "mpitrain/collectives/detail/shm_segment.hpp"

namespace mpitrain {
namespace {

using detail::CollectiveArgs;

// Returns the parent communicator a Fortran handle names; throws MpiError (MPI_ERR_COMM)
// without calling a collective when it names none.
MPI_Comm parent_from_fortran(std::int64_t fortran_handle, int world_rank) {
  // MPI_Fint is an int: a wider value cannot be a handle (and must not wrap onto one).
  MPI_Comm parent = MPI_COMM_NULL;
  if (fortran_handle >= INT_MIN && fortran_handle <= INT_MAX) {
    parent = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_handle));
  }
  // Open MPI answers an index outside its table (or a freed communicator's) with a null
  // pointer rather than MPI_COMM_NULL; a value-initialised MPI_Comm is that null.
  if (parent == MPI_COMM_NULL || parent == MPI_Comm{}) {
    throw MpiError("MPI_Comm_f2c", world_rank, 0, MPI_ERR_COMM,
                   "Fortran handle " + std::to_string(fortran_handle) +
                       " names no communicator");
  }
  return parent;
}

// Fills ctx's node layout: ranks sharing memory form a node; keyed by rank, so local rank 0
// is the node's lowest rank, node ranks follow the ranks' order, and nodes are numbered in
// the order of their lowest ranks.
void find_node_layout(detail::CommContext& ctx) {
  ctx.check(MPI_Comm_split_type(ctx.comm, MPI_COMM_TYPE_SHARED, ctx.rank, MPI_INFO_NULL,
                                &ctx.node),
            "MPI_Comm_split_type", 0);
  ctx.check(MPI_Comm_set_errhandler(ctx.node, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", 0);
  ctx.check(MPI_Comm_rank(ctx.node, &ctx.local_rank), "MPI_Comm_rank", 0);
  ctx.check(MPI_Comm_size(ctx.node, &ctx.local_size), "MPI_Comm_size", 0);
  int lowest_rank_on_node = ctx.rank;
  ctx.check(MPI_Bcast(&lowest_rank_on_node, 1, MPI_INT, 0, ctx.node), "MPI_Bcast", 1);
  std::vector<int> lowest(static_cast<std::size_t>(ctx.size), 0);
  ctx.check(MPI_Allgather(&lowest_rank_on_node, 1, MPI_INT, lowest.data(), 1, MPI_INT, ctx.comm),
            "MPI_Allgather", 1);
  ctx.node_count = 0;
  ctx.node_index = 0;
  ctx.node_rank_of.assign(lowest.size(), -1);
  int next_node_rank = 0;
  for (int r = 0; r < ctx.size; ++r) {
    const int lowest_of_r = lowest[static_cast<std::size_t>(r)];
    const int leader = lowest_of_r == r ? 1 : 0;
    ctx.node_count += leader;
    if (r < lowest_rank_on_node) ctx.node_index += leader;
    if (lowest_of_r == lowest_rank_on_node) ctx.node_rank_of[static_cast<std::size_t>(r)] = next_node_rank++;
  }
  // Every node holds local_size ranks when each node's lowest rank leads local_size ranks.
  std::vector<int> ranks_led(lowest.size(), 0);
  for (const int l : lowest) ++ranks_led[static_cast<std::size_t>(l)];
  ctx.uniform_nodes = true;
  for (int r = 0; r < ctx.size; ++r) {
    const int n = ranks_led[static_cast<std::size_t>(r)];
    if (n != 0 && n != ctx.local_size) ctx.uniform_nodes = false;
  }
  // The cross-node communicator (hierarchical algorithm): every rank decides alike, since
  // node_count and uniform_nodes come from the same allgathered table.
  if (ctx.node_count > 1 && ctx.uniform_nodes) {
    ctx.check(MPI_Comm_split(ctx.comm, ctx.local_rank, ctx.rank, &ctx.cross), "MPI_Comm_split",
              0);
    ctx.check(MPI_Comm_set_errhandler(ctx.cross, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
              0);
    ctx.check(MPI_Comm_rank(ctx.cross, &ctx.cross_rank), "MPI_Comm_rank", 0);
    ctx.check(MPI_Comm_size(ctx.cross, &ctx.cross_size), "MPI_Comm_size", 0);
  }
}

// Counts the threads inside a collective that has a deadline while it lives (none without
// one: the path without a deadline stays as it was).
class InsideCollective {
 public:
  explicit InsideCollective(detail::CommContext& ctx) noexcept
      : count_(ctx.timeout.count() > 0 ? &ctx.watch.inside : nullptr) {
    if (count_ != nullptr) count_->fetch_add(1, std::memory_order_relaxed);
  }
  ~InsideCollective() {
    if (count_ != nullptr) count_->fetch_sub(1, std::memory_order_relaxed);
  }
  InsideCollective(const InsideCollective&) = delete;
  InsideCollective& operator=(const InsideCollective&) = delete;

 private:
  std::atomic<int>* count_;
};

// Throws std::logic_error once a wait of this communicator timed out (CollectiveTimeout was
// thrown): the ranks no longer agree on which collective runs.
void require_usable(const detail::CommContext& ctx, const CollectiveArgs& a) {
  if (ctx.broken) {
    throw std::logic_error(fmt::format("{} on rank {}: the communicator is unusable after a "
                                       "collective timed out",
                                       to_string(a.op), ctx.rank));
  }
}

// Returns the arguments of one call of `op` on `count` elements of `type` (send and recv
// as given; the rest at their defaults, which the caller adjusts).
CollectiveArgs make_args(Collective op, const void* send, void* recv, std::size_t count,
                         DType type, ReduceOp reduce = ReduceOp::sum) {
  CollectiveArgs a;
  a.op = op;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.type = type;
  a.reduce = reduce;
  return a;
}

// Returns the table in `path`, loaded by every rank of `comm` (collective); throws
// std::runtime_error on every rank, naming the ranks and their errors, when a rank cannot
// load it or the ranks' tables differ.
AlgorithmSelection agreed_selection(const Communicator& comm, const std::string& path) {
  std::string error;
  std::int64_t digest = 0;
  std::optional<AlgorithmSelection> table;
  try {
    table = AlgorithmSelection::load(path);
    digest = static_cast<std::int64_t>(table->digest());
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::vector<std::string> errors = comm.allgather_strings(error);
  const std::vector<std::int64_t> digests = comm.allgather_value(digest);
  std::string problems;
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) problems += fmt::format("\n  rank {}: {}", r, errors[r]);
    else if (digests[r] != digests[0]) problems += fmt::format("\n  rank {}: a different table", r);
  }
  if (!problems.empty()) {
    throw std::runtime_error(
        fmt::format("algorithm table {} on rank {}:{}", path, comm.rank(), problems));
  }
  return std::move(*table);
}

// Throws MpiError (MPI_ERR_ROOT) naming the MPI call of a broadcast or gather whose root is
// not a rank, before any algorithm runs: every algorithm gets a valid root.
void check_root_of(const detail::CommContext& ctx, const CollectiveArgs& a, bool nonblocking) {
  if (a.op == Collective::broadcast) {
    ctx.check_root(nonblocking ? "MPI_Ibcast" : "MPI_Bcast", a.root, a.count);
  } else if (a.op == Collective::gather) {
    ctx.check_root(nonblocking ? "MPI_Igather" : "MPI_Gather", a.root, a.count);
  }
}

// Returns "allreduce on rank 3 (count 12, bf16 avg)": the call as error messages name it.
std::string describe(const CollectiveArgs& a, int rank, bool nonblocking) {
  std::string what = fmt::format("{}{} on rank {} (count {}, {}", nonblocking ? "i" : "",
                                 to_string(a.op), rank, a.count, to_string(a.type));
  if (a.has_wire()) what += fmt::format(" as {}", to_string(*a.wire));
  if (a.op == Collective::allreduce || a.op == Collective::reduce_scatter) {
    what += fmt::format(" {}", to_string(a.reduce));
  }
  return what + ")";
}

}  // namespace

// ---- construction -----------------------------------------------------------------------------

Communicator::Communicator(const MpiRuntime& runtime)
    : Communicator(runtime, static_cast<std::int64_t>(MPI_Comm_c2f(MPI_COMM_WORLD))) {}

Communicator::Communicator(const MpiRuntime& runtime, std::int64_t fortran_handle)
    : ctx_(std::make_unique<detail::CommContext>()) {
  detail::CommContext& c = *ctx_;
  const int world_rank = runtime.world_rank();
  const MPI_Comm parent = parent_from_fortran(fortran_handle, world_rank);
  {
    // The duplicate inherits the parent's handler; errors of the dup itself are raised on
    // the parent, whose handler belongs to the host (see detail/scoped_errors_return.hpp).
    const detail::ScopedErrorsReturn errors_return(parent, world_rank);
    check_mpi(MPI_Comm_dup(parent, &c.comm), "MPI_Comm_dup", world_rank, 0);
  }
  check_mpi(MPI_Comm_set_errhandler(c.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
            world_rank, 0);
  check_mpi(MPI_Comm_rank(c.comm, &c.rank), "MPI_Comm_rank", world_rank, 0);
  check_mpi(MPI_Comm_size(c.comm, &c.size), "MPI_Comm_size", c.rank, 0);
  c.max_call = INT_MAX;
  find_node_layout(c);
  check_mpi(MPI_Comm_dup(c.comm, &c.check_comm), "MPI_Comm_dup (collective checks)", c.rank, 0);
  check_mpi(MPI_Comm_set_errhandler(c.check_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
            c.rank, 0);
  if (const char* debug = std::getenv("MPITRAIN_DEBUG_COLLECTIVES"); debug != nullptr) {
    c.watch.debug = std::string_view(debug) == "1";
  }
  c.create_half_ops();
  c.shm = std::make_unique<detail::ShmSegment>(c.node);
  rank_ = c.rank;
  size_ = c.size;
  thread_level_ = runtime.thread_level();
  local_rank_ = c.local_rank;
  local_size_ = c.local_size;
  node_count_ = c.node_count;
  node_index_ = c.node_index;
  // Last: the ranks agree on the table through this communicator, which needs its rank and
  // size above.
  if (const char* table = std::getenv("MPITRAIN_ALGORITHM_TABLE"); table != nullptr && *table) {
    use_algorithm_table(table);
  }
}

Communicator Communicator::self(const MpiRuntime& runtime) {
  return Communicator(runtime, static_cast<std::int64_t>(MPI_Comm_c2f(MPI_COMM_SELF)));
}

Communicator::~Communicator() = default;

Communicator::Communicator(Communicator&& other) noexcept
    : ctx_(std::move(other.ctx_)),
      selection_(std::move(other.selection_)),
      rank_(other.rank_),
      size_(other.size_),
      thread_level_(other.thread_level_),
      local_rank_(other.local_rank_),
      local_size_(other.local_size_),
      node_count_(other.node_count_),
      node_index_(other.node_index_),
      issued_(other.issued_.load()) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    ctx_ = std::move(other.ctx_);
    selection_ = std::move(other.selection_);
    rank_ = other.rank_;
    size_ = other.size_;
    thread_level_ = other.thread_level_;
    local_rank_ = other.local_rank_;
    local_size_ = other.local_size_;
    node_count_ = other.node_count_;
    node_index_ = other.node_index_;
    issued_.store(other.issued_.load());
  }
  return *this;
}

void Communicator::use_algorithm_table(const std::string& path) {
  selection_ = agreed_selection(*this, path);
}

SharedBuffer Communicator::allocate_shared(std::size_t bytes) const {
  return ctx_->shm->allocate(bytes);
}

std::size_t Communicator::shared_bytes_mapped() const noexcept { return ctx_->shm->arena_bytes(); }

std::optional<double> Communicator::core_latency_ns() const {
  constexpr int kRoundTrips = 2000;
  constexpr int kWarmup = 200;
  detail::reset_probe(*ctx_->shm);
  barrier();
  std::optional<std::chrono::duration<double, std::nano>> one_way;
  try {
    one_way = detail::measure_core_latency(*ctx_->shm, kRoundTrips, kWarmup);
  } catch (const detail::WaitExpired& e) {
    // Reported as the barrier's timeout would be: the peer passed the barrier, then stopped.
    const std::uint64_t seq = issued_.load();
    ctx_->watch.expire(*ctx_, fmt::format("core_latency_ns (after barrier #{})", seq), seq,
                       static_cast<int>(Collective::barrier), e.waited());
  }
  const double largest = allreduce_value(one_way ? one_way->count() : -1.0, ReduceOp::max);
  if (largest < 0) return std::nullopt;
  return largest;
}

void Communicator::set_timeout(std::chrono::nanoseconds timeout) const noexcept {
  ctx_->timeout = std::max(timeout, std::chrono::nanoseconds{0});
  ctx_->shm->set_timeout(ctx_->timeout);
}

std::chrono::nanoseconds Communicator::timeout() const noexcept { return ctx_->timeout; }

void Communicator::set_timeout_action(TimeoutAction action) const noexcept {
  ctx_->watch.action = action;
}

TimeoutAction Communicator::timeout_action() const noexcept { return ctx_->watch.action; }

void Communicator::set_debug_collectives(bool on) const noexcept { ctx_->watch.debug = on; }

bool Communicator::debug_collectives() const noexcept { return ctx_->watch.debug; }

void Communicator::check_collectives(bool wait) const {
  ctx_->watch.check_fingerprints(*ctx_, issued_.load(), wait);
}

bool Communicator::waiting_for_peers() const noexcept {
  return ctx_->watch.inside.load(std::memory_order_relaxed) > 0;
}

Communicator::CallSite::CallSite(const Communicator& comm, const char* name) noexcept
    : comm_(comm), previous_(comm.ctx_->watch.site.exchange(name, std::memory_order_relaxed)) {}

Communicator::CallSite::~CallSite() {
  comm_.ctx_->watch.site.store(previous_, std::memory_order_relaxed);
}

std::size_t Communicator::max_call_count() const noexcept { return ctx_->max_call; }

void Communicator::set_max_call_count(std::size_t count) noexcept {
  ctx_->max_call = std::clamp<std::size_t>(count, 1, INT_MAX);
}

void Communicator::abort(int error_code) const noexcept {
  MPI_Abort(ctx_ ? ctx_->comm : MPI_COMM_WORLD, error_code);
  std::abort();  // MPI_Abort does not return; satisfies [[noreturn]] if it ever did
}

void Communicator::require_equal_sizes(std::string_view call, std::size_t expected,
                                       std::size_t got) const {
  if (expected != got) {
    throw std::invalid_argument(std::string(call) + " on rank " + std::to_string(rank_) +
                                ": buffer sizes do not match (expected " +
                                std::to_string(expected) + " elements, got " +
                                std::to_string(got) + ")");
  }
}

// ---- dispatch -------------------------------------------------------------------------------

const detail::Algorithm& Communicator::resolve(const CollectiveArgs& args, std::string_view algo,
                                               bool nonblocking) const {
  const detail::CommContext& c = *ctx_;
  // Returns why `a` cannot run this call ("" when it can).
  const auto why_not = [&](const detail::Algorithm& a) {
    std::string why = a.why_not(args, c);
    if (why.empty() && nonblocking) why = a.why_not_nonblocking(args);
    return why;
  };
  if (algo == kDefaultAlgorithm) {
    SelectionQuery q;
    q.op = args.op;
    q.type = args.sent_type();
    q.wire = args.has_wire();
    q.reduce = args.reduce;
    q.bytes = args.bytes_as_sent();
    q.ranks = size_;
    q.local_ranks = local_size_;
    q.nodes = node_count_;
    algo = selection_.choose(q, [&](std::string_view name) {
      const detail::Algorithm* a = detail::find_algorithm(args.op, name);
      return a != nullptr && why_not(*a).empty();
    });
  }
  const detail::Algorithm* a = detail::find_algorithm(args.op, algo);
  if (a == nullptr) require_algorithm(args.op, algo);  // throws, listing the valid names
  const std::string why = why_not(*a);
  if (!why.empty()) {
    throw std::invalid_argument(fmt::format("{}: algorithm '{}' cannot run it: {}",
                                            describe(args, rank_, nonblocking), algo, why));
  }
  return *a;
}

void Communicator::run(const CollectiveArgs& args, std::string_view algo) const {
  detail::CommContext& c = *ctx_;
  const std::uint64_t seq = ++issued_;
  require_usable(c, args);
  check_root_of(c, args, false);
  const detail::Algorithm& a = resolve(args, algo, false);
  c.watch.enter(c, args, a.name(), seq);
  const InsideCollective inside(c);
  try {
    a.run(c, args);
  } catch (const detail::WaitExpired& e) {
    c.watch.expire(c, fmt::format("{} #{}", detail::CollectiveWatch::describe(args), seq), seq,
                   static_cast<int>(args.op), e.waited());
  } catch (const detail::ShmTimeout& e) {
    c.watch.expire(c, fmt::format("{} #{}", detail::CollectiveWatch::describe(args), seq), seq,
                   static_cast<int>(args.op), e.waited());
  }
}

Request Communicator::post(const CollectiveArgs& args, std::string_view algo) const {
  detail::CommContext& c = *ctx_;
  require_usable(c, args);
  const detail::Algorithm& a = resolve(args, algo, true);
  const std::uint64_t seq = ++issued_;
  check_root_of(c, args, true);
  c.watch.enter(c, args, a.name(), seq);
  Request request = a.post(c, args);
  if (Request::State* state = request.state(); state != nullptr && c.timeout.count() > 0) {
    // Request::wait reports an expired wait as this collective's (it may run much later).
    detail::CommContext* context = &c;
    std::string what = fmt::format("i{} #{}", detail::CollectiveWatch::describe(args), seq);
    const int op = static_cast<int>(args.op);
    state->on_expired = [context, what = std::move(what), seq, op](std::chrono::nanoseconds waited) {
      context->watch.expire(*context, what, seq, op, waited);
    };
  }
  return request;
}

std::string_view Communicator::default_allreduce_algorithm(std::size_t count, DType type,
                                                           ReduceOp op) const {
  const CollectiveArgs args =
      make_args(Collective::allreduce, nullptr, nullptr, count, type, op);
  return resolve(args, kDefaultAlgorithm, false).name();
}

std::string_view Communicator::default_wire_allreduce_algorithm(std::size_t count, DType wire,
                                                                ReduceOp op) const {
  if (!detail::is_half(wire)) return default_allreduce_algorithm(count, wire, op);
  CollectiveArgs args = make_args(Collective::allreduce, nullptr, nullptr, count, DType::f32, op);
  args.wire = wire;
  return resolve(args, kDefaultAlgorithm, false).name();
}

std::string Communicator::cannot_run(std::string_view algo, Collective op, DType type,
                                     ReduceOp reduce) const {
  // Two separate buffers for a call of one element per rank (never read or written), so that
  // checks of where the buffers lie (shm's reduce_scatter refuses overlapping ones) answer
  // for the algorithm, not for the stand-in arguments.
  std::vector<std::byte> send(static_cast<std::size_t>(size_) * dtype_bytes(type));
  std::vector<std::byte> recv(send.size());
  const CollectiveArgs args = make_args(op, send.data(), recv.data(), 1, type, reduce);
  try {
    resolve(args, algo, false);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

// ---- blocking collectives ---------------------------------------------------------------------

void Communicator::barrier() const {
  run(make_args(Collective::barrier, nullptr, nullptr, 0, DType::u8), kDefaultAlgorithm);
}

void Communicator::broadcast(void* data, std::size_t count, DType type, int root,
                             std::string_view algo) const {
  CollectiveArgs args = make_args(Collective::broadcast, data, data, count, type);
  args.root = root;
  run(args, algo);
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DType type,
                             ReduceOp op, std::string_view algo) const {
  run(make_args(Collective::allreduce, send, recv, count, type, op), algo);
}

std::optional<bool> Communicator::allreduce(std::span<float> data, ReduceOp op, DType wire,
                                            std::string_view algo,
                                            std::span<std::uint16_t> scratch) const {
  if (wire == DType::f32) {
    std::optional<bool> all_finite;
    CollectiveArgs args =
        make_args(Collective::allreduce, data.data(), data.data(), data.size(), DType::f32, op);
    args.all_finite = &all_finite;
    run(args, algo);
    return all_finite;
  }
  if (!detail::is_half(wire)) {
    throw std::invalid_argument("allreduce of fp32 data on rank " + std::to_string(rank_) +
                                ": the wire type must be f32, bf16 or f16, not " +
                                std::string(to_string(wire)));
  }
  const std::size_t count = data.size();
  if (count == 0) {
    ++issued_;
    return std::nullopt;
  }
  std::unique_ptr<std::uint16_t[]> own;
  if (scratch.empty()) {
    own = std::make_unique_for_overwrite<std::uint16_t[]>(count);  // no zero-filling pass
    scratch = std::span<std::uint16_t>(own.get(), count);
  } else if (scratch.size() < count) {
    throw std::invalid_argument("allreduce of fp32 data on rank " + std::to_string(rank_) +
                                ": scratch holds " + std::to_string(scratch.size()) +
                                " 16-bit values for " + std::to_string(count) + " values");
  }
  CollectiveArgs args =
      make_args(Collective::allreduce, data.data(), data.data(), count, DType::f32, op);
  args.wire = wire;
  args.wire_scratch = scratch.data();
  run(args, algo);
  return std::nullopt;
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  DType type, ReduceOp op, std::string_view algo) const {
  run(make_args(Collective::reduce_scatter, send, recv, recv_count, type, op), algo);
}

void Communicator::allgather(const void* send, void* recv, std::size_t send_count,
                             DType type, std::string_view algo) const {
  run(make_args(Collective::allgather, send, recv, send_count, type), algo);
}

void Communicator::allgatherv(const void* send, std::size_t send_count, void* recv,
                              std::span<const std::size_t> recv_counts, DType type) const {
  CollectiveArgs args = make_args(Collective::allgatherv, send, recv, send_count, type);
  args.recv_counts = recv_counts;
  run(args, kDefaultAlgorithm);
}

void Communicator::gather(const void* send, void* recv, std::size_t send_count, DType type,
                          int root) const {
  CollectiveArgs args = make_args(Collective::gather, send, recv, send_count, type);
  args.root = root;
  run(args, kDefaultAlgorithm);
}

std::vector<std::string> Communicator::allgather_strings(std::string_view text) const {
  const std::vector<std::int64_t> lengths =
      allgather_value<std::int64_t>(static_cast<std::int64_t>(text.size()));
  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (std::int64_t len : lengths) {
    counts.push_back(static_cast<std::size_t>(len));
    total += static_cast<std::size_t>(len);
  }
  std::string all(total, '\0');
  allgatherv(text.data(), text.size(), all.data(), counts, DType::u8);
  std::vector<std::string> out;
  out.reserve(counts.size());
  std::size_t at = 0;
  for (std::size_t c : counts) {
    out.push_back(all.substr(at, c));
    at += c;
  }
  return out;
}

// ---- nonblocking collectives --------------------------------------------------------------------

Request Communicator::ibarrier() const {
  return post(make_args(Collective::barrier, nullptr, nullptr, 0, DType::u8), kDefaultAlgorithm);
}

Request Communicator::ibroadcast(void* data, std::size_t count, DType type, int root) const {
  CollectiveArgs args = make_args(Collective::broadcast, data, data, count, type);
  args.root = root;
  return post(args, kDefaultAlgorithm);
}

Request Communicator::iallreduce(const void* send, void* recv, std::size_t count, DType type,
                                 ReduceOp op, std::string_view algo) const {
  return post(make_args(Collective::allreduce, send, recv, count, type, op), algo);
}

Request Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                      DType type, ReduceOp op) const {
  return post(make_args(Collective::reduce_scatter, send, recv, recv_count, type, op),
              kDefaultAlgorithm);
}

Request Communicator::iallgather(const void* send, void* recv, std::size_t send_count,
                                 DType type) const {
  return post(make_args(Collective::allgather, send, recv, send_count, type), kDefaultAlgorithm);
}

Request Communicator::iallgatherv(const void* send, std::size_t send_count, void* recv,
                                  std::span<const std::size_t> recv_counts, DType type) const {
  CollectiveArgs args = make_args(Collective::allgatherv, send, recv, send_count, type);
  args.recv_counts = recv_counts;
  return post(args, kDefaultAlgorithm);
}

Request Communicator::igather(const void* send, void* recv, std::size_t send_count, DType type,
                              int root) const {
  CollectiveArgs args = make_args(Collective::gather, send, recv, send_count, type);
  args.root = root;
  return post(args, kDefaultAlgorithm);
}

}  // namespace mpitrain
