// Communicator: typed, size_t-counted collectives over a duplicate of MPI_COMM_WORLD (or of a
// communicator the host hands in).
//
// Which algorithm AllreduceAlgorithm::default_ runs (default_allreduce_algorithm):
//   - f32, f64, i32, i64, u8: MPI_Allreduce with MPI's own type and op, called directly on the
//     caller's buffers (no copy, no extra call), so the engine's default is plain MPI.
//   - bf16, f16: MPI has no such types. MPI_Allreduce with our user ops (MPI_UINT16_T data,
//     fp32 combine, one rounding per combine) has the lower latency for small buffers (one
//     exchange at 2 ranks against the ring's two); the ring (ring_allreduce.cpp), moving the
//     same 16-bit data with AVX2/F16C combines fused into the receive, is faster for larger
//     ones. The default runs the ring from
//       kHalfRingMinBytes * (size() - 1)      bytes as sent, for sum, max and min,
//       kHalfAvgRingMinBytes * (size() - 1)   for avg (MPI's path must stage fp32 to divide
//                                             before the final rounding: twice the traffic),
//     and MPI below, except that at 2 ranks bf16 sums, maxima and minima of
//     [kBf16MpiBandMinBytes, kBf16MpiBandEndBytes) bytes (2 MiB up to 8 MiB) use MPI.
//     Measured at 2 ranks (Open MPI 4.1.4, vader/CMA, 2-core AMD EPYC VM shared with other
//     work), `collective_bench --dtype bf16,f16 --algo all`, 10 runs with the rows
//     interleaved with balanced predecessors (3 of 1 KiB-256 MiB, 4 of 256 KiB-16 MiB, 3 of
//     1.5-12 MiB). Ring time / MPI time for sums: 1.05-1.95 at 1-8 KiB, 0.6-0.9 from 16 KiB
//     to 1.5 MiB, 0.9-1.02 at 8 MiB, 0.33-0.78 from 16 MiB up. From 2 to 6 MiB both
//     algorithms switch, run to run, between a fast and a slow mode (2 MiB: about 0.4 ms or
//     1 ms for either); in the slow mode the ring is faster (time ratio 0.75-0.9), in the
//     fast mode it is not, and for bf16 it reached only 0.91-0.98 x MPI's busbw at 2, 3 and
//     4 MiB: below the 0.95 x MPI that the default must keep, hence the band, where the
//     default is MPI itself. f16 kept the ring at 0.967 x MPI or better in those runs, so
//     it has no band. Above 2 ranks nothing
//     could be measured (one 2-core node), and MPI's algorithms differ with the number of
//     ranks: the band is not applied. Averages: ring time / MPI time 1.35 at 1 KiB,
//     0.2-0.86 from 2 KiB up. The ring's latency grows with its 2(n-1) steps, hence the
//     factor size() - 1 (a heuristic). One rank runs MPI always.
//
// fp32 data with a 16-bit wire format (allreduce(std::span<float>, op, wire, ...); the rule is
// default_wire_allreduce_algorithm): the fused ring (wire_ring_allreduce.cpp) from the same
// sizes as above (bytes as sent), for every op; MPI below (one conversion pass each way around
// MPI_Allreduce). The bf16 band does not apply: there MPI pays the two conversion passes and
// the fused ring does not. Measured at 2 ranks (same machine, fused ring vs convert + MPI +
// convert, medians of 40-400 interleaved runs, with and without huge pages): bf16 sums
// ring/MPI time 1.2-1.4 at 1-2 KiB, 0.9-1.06 at 4-32 KiB, 0.83-0.92 at 128 KiB-1 MiB,
// 0.67-0.86 from 1.5 to 16 MiB (0.70-0.84 in the 2-8 MiB band), 0.45 at 32 MiB; f16 sums
// 1.2-1.6 at 1-2 KiB, 0.75-0.99 from 4 KiB to 8 MiB; bf16 averages 0.97 at 0.5-1 KiB,
// 0.12-0.7 from 2 KiB up.
//
// Splitting: every call hands MPI at most max_call_count() elements (INT_MAX unless lowered).
// allreduce and broadcast loop over pieces; reduce_scatter, allgather, allgatherv and gather,
// whose per-rank blocks cannot be split in place, fall back to one reduce/broadcast per rank
// (or point-to-point for gather) when a block or the total exceeds the limit.

#include "mpitrain/collectives/communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/reduce_kernels.hpp"
#include "mpitrain/collectives/ring_allreduce.hpp"
#include "mpitrain/collectives/scoped_errors_return.hpp"
#include "mpitrain/collectives/wire_ring_allreduce.hpp"

namespace mpitrain {
namespace {

// 16-bit buffers from this size (bytes as sent) times (size() - 1) upward use the ring by
// default (see the rule at the top of this file).
constexpr std::size_t kHalfRingMinBytes = std::size_t{16} << 10;
constexpr std::size_t kHalfAvgRingMinBytes = std::size_t{2} << 10;
// At 2 ranks, bf16 sums, maxima and minima of [min, end) bytes as sent use MPI.
constexpr std::size_t kBf16MpiBandMinBytes = std::size_t{2} << 20;
constexpr std::size_t kBf16MpiBandEndBytes = std::size_t{8} << 20;
// fp32 staging for 16-bit averages through MPI is done in pieces of at most this many
// elements, bounding the extra memory to 32 MiB per call.
constexpr std::size_t kStageElements = std::size_t{8} << 20;
constexpr int kGatherTag = 0x4741;  // point-to-point fallback of gather ("GA")

constexpr std::array<AllreduceAlgorithm, 3> kAlgorithms = {
    AllreduceAlgorithm::default_, AllreduceAlgorithm::mpi, AllreduceAlgorithm::ring};

bool is_half(DType type) noexcept { return type == DType::bf16 || type == DType::f16; }

MPI_Datatype mpi_type(DType type) noexcept {
  switch (type) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;  // combined by our user ops
  }
  return MPI_BYTE;
}

// MPI user op: inout[i] = in[i] (op) inout[i] for a 16-bit format (fp32 combine, one rounding).
template <DType T, ReduceOp Op> void half_user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::reduce_inplace(inout, in, static_cast<std::size_t>(*len), T, Op);
}

// Index of a 16-bit type and of a combining op in Handle::half_ops.
std::size_t half_index(DType type) noexcept { return type == DType::bf16 ? 0 : 1; }
std::size_t op_index(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return 0;
    case ReduceOp::max: return 1;
    case ReduceOp::min: return 2;
  }
  return 0;
}

const std::byte* bytes(const void* p) noexcept { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) noexcept { return static_cast<std::byte*>(p); }

// Returns the offset of each rank's block in an allgatherv output (elements), after checking
// that recv_counts has one entry per rank and that this rank's entry is send_count; throws
// std::invalid_argument naming `call` and the rank otherwise.
std::vector<std::size_t> allgatherv_displacements(std::string_view call, int rank, int size,
                                                  std::size_t send_count,
                                                  std::span<const std::size_t> recv_counts) {
  const std::string where = std::string(call) + " on rank " + std::to_string(rank) + ": ";
  if (recv_counts.size() != static_cast<std::size_t>(size)) {
    throw std::invalid_argument(where + "recv_counts has " + std::to_string(recv_counts.size()) +
                                " entries for " + std::to_string(size) + " ranks");
  }
  if (recv_counts[static_cast<std::size_t>(rank)] != send_count) {
    throw std::invalid_argument(where + "send_count " + std::to_string(send_count) +
                                " differs from recv_counts[" + std::to_string(rank) + "] = " +
                                std::to_string(recv_counts[static_cast<std::size_t>(rank)]));
  }
  std::vector<std::size_t> displs(recv_counts.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < recv_counts.size(); ++r) {
    displs[r] = total;
    total += recv_counts[r];
  }
  return displs;
}

}  // namespace

// ---- Communicator::Handle: the MPI objects, freed in reverse order of creation -------------

struct Communicator::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm node = MPI_COMM_NULL;  // ranks sharing memory with this one
  // User ops for bf16 and f16: [half_index][op_index] = sum, max, min.
  std::array<std::array<MPI_Op, 3>, 2> half_ops{{{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                                                 {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}}};
  std::size_t max_call = INT_MAX;
  int rank = 0;
  int size = 1;

  Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  // Frees the ops and communicators unless MPI is already finalised (then they are gone).
  // Return codes are ignored: a destructor cannot report them, and nothing can be retried.
  ~Handle() {
    int finalized = 0;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
    for (auto& ops : half_ops) {
      for (MPI_Op& op : ops) {
        if (op != MPI_OP_NULL) MPI_Op_free(&op);
      }
    }
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  void check(int rc, std::string_view call, std::size_t count) const {
    check_mpi(rc, call, rank, count);
  }
  MPI_Op op(DType type, ReduceOp op) const noexcept {
    if (is_half(type)) return half_ops[half_index(type)][op_index(op)];
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return MPI_SUM;
      case ReduceOp::max: return MPI_MAX;
      case ReduceOp::min: return MPI_MIN;
    }
    return MPI_SUM;
  }
  // Throws MpiError (MPI_ERR_ROOT) naming the call when root is not a rank.
  void check_root(std::string_view call, int root, std::size_t count) const {
    if (root < 0 || root >= size) {
      throw MpiError(call, rank, count, MPI_ERR_ROOT,
                     "root " + std::to_string(root) + " is not a rank of this communicator (size " +
                         std::to_string(size) + ")");
    }
  }
  // Calls fn(offset, length) for consecutive pieces of at most `limit` elements.
  template <class Fn> static void pieces(std::size_t count, std::size_t limit, Fn&& fn) {
    for (std::size_t off = 0; off < count; off += limit) fn(off, std::min(limit, count - off));
  }
};

// ---- Request ------------------------------------------------------------------------------

struct Request::State {
  int rank = 0;
  std::string call;
  std::size_t count = 0;
  std::vector<MPI_Request> reqs;
  std::vector<float> stage;      // fp32 staging of 16-bit averages
  std::vector<int> counts;       // MPI_Iallgatherv's count and displacement arrays, which
  std::vector<int> displs;       // MPI reads until the request completes
  std::function<void()> finish;  // runs once, after every request completed
  bool done = false;

  void complete() {
    done = true;
    if (finish) finish();
  }
};

Request::Request() noexcept = default;
Request::Request(std::unique_ptr<State> state) : state_(std::move(state)) {}
Request::Request(Request&&) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->done) {
      try {
        wait();
      } catch (...) {  // noexcept move: a failure here has no caller to reach
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Request::~Request() {
  if (state_ && !state_->done) {
    try {
      wait();
    } catch (...) {  // a destructor must not throw; call wait() to see the error
    }
  }
}

void Request::wait() {
  if (!state_ || state_->done) return;
  if (!state_->reqs.empty()) {
    const int rc = MPI_Waitall(static_cast<int>(state_->reqs.size()), state_->reqs.data(),
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      state_->done = true;
      throw MpiError("MPI_Waitall (" + state_->call + ")", state_->rank, state_->count, rc, {});
    }
  }
  state_->complete();
}

bool Request::test() {
  if (!state_ || state_->done) return true;
  if (!state_->reqs.empty()) {
    int flag = 0;
    const int rc = MPI_Testall(static_cast<int>(state_->reqs.size()), state_->reqs.data(), &flag,
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      state_->done = true;
      throw MpiError("MPI_Testall (" + state_->call + ")", state_->rank, state_->count, rc, {});
    }
    if (!flag) return false;
  }
  state_->complete();
  return true;
}

// ---- algorithm names ------------------------------------------------------------------------

std::string_view to_string(AllreduceAlgorithm algo) noexcept {
  switch (algo) {
    case AllreduceAlgorithm::default_: return "default";
    case AllreduceAlgorithm::mpi: return "mpi";
    case AllreduceAlgorithm::ring: return "ring";
  }
  return "unknown";
}

AllreduceAlgorithm parse_allreduce_algorithm(std::string_view name) {
  for (AllreduceAlgorithm a : kAlgorithms) {
    if (to_string(a) == name) return a;
  }
  throw std::invalid_argument("unknown allreduce algorithm '" + std::string(name) +
                              "' (valid: default, mpi, ring)");
}

std::span<const AllreduceAlgorithm> all_allreduce_algorithms() noexcept { return kAlgorithms; }

// ---- construction -----------------------------------------------------------------------------

Communicator::Communicator(const MpiRuntime& runtime)
    : Communicator(runtime, static_cast<std::int64_t>(MPI_Comm_c2f(MPI_COMM_WORLD))) {}

Communicator::Communicator(const MpiRuntime& runtime, std::int64_t fortran_handle)
    : handle_(std::make_unique<Handle>()) {
  Handle& h = *handle_;
  const int world_rank = runtime.world_rank();
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
  {
    // The duplicate inherits the parent's handler; errors of the dup itself are raised on
    // the parent, whose handler belongs to the host (see scoped_errors_return.hpp).
    const detail::ScopedErrorsReturn errors_return(parent, world_rank);
    check_mpi(MPI_Comm_dup(parent, &h.comm), "MPI_Comm_dup", world_rank, 0);
  }
  check_mpi(MPI_Comm_set_errhandler(h.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
            world_rank, 0);
  check_mpi(MPI_Comm_rank(h.comm, &rank_), "MPI_Comm_rank", world_rank, 0);
  check_mpi(MPI_Comm_size(h.comm, &size_), "MPI_Comm_size", rank_, 0);
  h.rank = rank_;
  h.size = size_;

  // Node topology: ranks sharing memory form a node; keyed by rank, so local rank 0 is the
  // node's lowest rank, and nodes are numbered in the order of their lowest ranks.
  h.check(MPI_Comm_split_type(h.comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &h.node),
          "MPI_Comm_split_type", 0);
  h.check(MPI_Comm_set_errhandler(h.node, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", 0);
  h.check(MPI_Comm_rank(h.node, &local_rank_), "MPI_Comm_rank", 0);
  h.check(MPI_Comm_size(h.node, &local_size_), "MPI_Comm_size", 0);
  int lowest_rank_on_node = rank_;
  h.check(MPI_Bcast(&lowest_rank_on_node, 1, MPI_INT, 0, h.node), "MPI_Bcast", 1);
  const int leader = local_rank_ == 0 ? 1 : 0;
  std::vector<int> leaders(static_cast<std::size_t>(size_), 0);
  h.check(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, h.comm),
          "MPI_Allgather", 1);
  node_count_ = 0;
  node_index_ = 0;
  for (int r = 0; r < size_; ++r) {
    node_count_ += leaders[static_cast<std::size_t>(r)];
    if (r < lowest_rank_on_node) node_index_ += leaders[static_cast<std::size_t>(r)];
  }

  const std::array<std::array<MPI_User_function*, 3>, 2> fns{{
      {&half_user_op<DType::bf16, ReduceOp::sum>, &half_user_op<DType::bf16, ReduceOp::max>,
       &half_user_op<DType::bf16, ReduceOp::min>},
      {&half_user_op<DType::f16, ReduceOp::sum>, &half_user_op<DType::f16, ReduceOp::max>,
       &half_user_op<DType::f16, ReduceOp::min>},
  }};
  for (std::size_t t = 0; t < 2; ++t) {
    for (std::size_t o = 0; o < 3; ++o) {
      h.check(MPI_Op_create(fns[t][o], /*commute=*/1, &h.half_ops[t][o]), "MPI_Op_create", 0);
    }
  }
}

Communicator Communicator::self(const MpiRuntime& runtime) {
  return Communicator(runtime, static_cast<std::int64_t>(MPI_Comm_c2f(MPI_COMM_SELF)));
}

Communicator::~Communicator() = default;

Communicator::Communicator(Communicator&& other) noexcept
    : handle_(std::move(other.handle_)),
      rank_(other.rank_),
      size_(other.size_),
      local_rank_(other.local_rank_),
      local_size_(other.local_size_),
      node_count_(other.node_count_),
      node_index_(other.node_index_),
      issued_(other.issued_.load()) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    handle_ = std::move(other.handle_);
    rank_ = other.rank_;
    size_ = other.size_;
    local_rank_ = other.local_rank_;
    local_size_ = other.local_size_;
    node_count_ = other.node_count_;
    node_index_ = other.node_index_;
    issued_.store(other.issued_.load());
  }
  return *this;
}

std::size_t Communicator::max_call_count() const noexcept { return handle_->max_call; }

void Communicator::set_max_call_count(std::size_t count) noexcept {
  handle_->max_call = std::clamp<std::size_t>(count, 1, INT_MAX);
}

void Communicator::abort(int error_code) const noexcept {
  MPI_Abort(handle_ ? handle_->comm : MPI_COMM_WORLD, error_code);
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

AllreduceAlgorithm Communicator::default_allreduce_algorithm(std::size_t count, DType type,
                                                              ReduceOp op) const noexcept {
  if (!is_half(type) || size_ == 1) return AllreduceAlgorithm::mpi;
  const std::size_t bytes = count * dtype_bytes(type);
  if (type == DType::bf16 && op != ReduceOp::avg && size_ == 2 && bytes >= kBf16MpiBandMinBytes &&
      bytes < kBf16MpiBandEndBytes) {
    return AllreduceAlgorithm::mpi;
  }
  const std::size_t per_step = op == ReduceOp::avg ? kHalfAvgRingMinBytes : kHalfRingMinBytes;
  const std::size_t min_bytes = per_step * static_cast<std::size_t>(size_ - 1);
  return bytes >= min_bytes ? AllreduceAlgorithm::ring : AllreduceAlgorithm::mpi;
}

AllreduceAlgorithm Communicator::default_wire_allreduce_algorithm(std::size_t count, DType wire,
                                                                   ReduceOp op) const noexcept {
  if (!is_half(wire)) return default_allreduce_algorithm(count, wire, op);
  if (size_ == 1) return AllreduceAlgorithm::mpi;
  const std::size_t bytes = count * dtype_bytes(wire);
  const std::size_t per_step = op == ReduceOp::avg ? kHalfAvgRingMinBytes : kHalfRingMinBytes;
  const std::size_t min_bytes = per_step * static_cast<std::size_t>(size_ - 1);
  return bytes >= min_bytes ? AllreduceAlgorithm::ring : AllreduceAlgorithm::mpi;
}

// ---- blocking collectives ---------------------------------------------------------------------

void Communicator::barrier() const {
  ++issued_;
  handle_->check(MPI_Barrier(handle_->comm), "MPI_Barrier", 0);
}

void Communicator::broadcast(void* data, std::size_t count, DType type, int root) const {
  ++issued_;
  const Handle& h = *handle_;
  h.check_root("MPI_Bcast", root, count);
  const std::size_t esize = dtype_bytes(type);
  Handle::pieces(count, h.max_call, [&](std::size_t off, std::size_t len) {
    h.check(MPI_Bcast(bytes(data) + off * esize, static_cast<int>(len), mpi_type(type), root,
                      h.comm),
            "MPI_Bcast", count);
  });
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DType type,
                             ReduceOp op, AllreduceAlgorithm algo) const {
  ++issued_;
  allreduce_uncounted(send, recv, count, type, op, algo);
}

void Communicator::allreduce_uncounted(const void* send, void* recv, std::size_t count,
                                       DType type, ReduceOp op, AllreduceAlgorithm algo) const {
  if (count == 0) return;
  const Handle& h = *handle_;
  if (algo == AllreduceAlgorithm::default_) algo = default_allreduce_algorithm(count, type, op);
  if (algo == AllreduceAlgorithm::ring) {
    detail::ring_allreduce(h.comm, rank_, size_, send, recv, count, type, op);
    return;
  }
  const std::size_t esize = dtype_bytes(type);
  if (is_half(type) && op == ReduceOp::avg) {
    // Sum in fp32 so that the division happens before the only rounding to 16 bits.
    std::vector<float> stage(std::min(count, kStageElements));
    Handle::pieces(count, std::min(h.max_call, kStageElements), [&](std::size_t off,
                                                                     std::size_t len) {
      detail::widen_to_f32(bytes(send) + off * esize, stage.data(), len, type);
      h.check(MPI_Allreduce(MPI_IN_PLACE, stage.data(), static_cast<int>(len), MPI_FLOAT,
                            MPI_SUM, h.comm),
              "MPI_Allreduce", count);
      detail::narrow_from_f32(stage.data(), bytes(recv) + off * esize, len, type, size_);
    });
    return;
  }
  const bool in_place = send == recv;
  const MPI_Datatype dt = mpi_type(type);
  const MPI_Op mop = h.op(type, op);
  Handle::pieces(count, h.max_call, [&](std::size_t off, std::size_t len) {
    h.check(MPI_Allreduce(in_place ? MPI_IN_PLACE : bytes(send) + off * esize,
                          bytes(recv) + off * esize, static_cast<int>(len), dt, mop, h.comm),
            "MPI_Allreduce", count);
  });
  if (op == ReduceOp::avg && size_ > 1) detail::divide_inplace(recv, count, type, size_);
}

void Communicator::allreduce(std::span<float> data, ReduceOp op, DType wire,
                             AllreduceAlgorithm algo, std::span<std::uint16_t> scratch) const {
  if (wire == DType::f32) {
    allreduce(data.data(), data.data(), data.size(), DType::f32, op, algo);
    return;
  }
  if (!is_half(wire)) {
    throw std::invalid_argument("allreduce of fp32 data on rank " + std::to_string(rank_) +
                                ": the wire type must be f32, bf16 or f16, not " +
                                std::string(to_string(wire)));
  }
  ++issued_;
  const std::size_t count = data.size();
  if (count == 0) return;
  std::unique_ptr<std::uint16_t[]> own;
  if (scratch.empty()) {
    own = std::make_unique_for_overwrite<std::uint16_t[]>(count);  // no zero-filling pass
    scratch = std::span<std::uint16_t>(own.get(), count);
  } else if (scratch.size() < count) {
    throw std::invalid_argument("allreduce of fp32 data on rank " + std::to_string(rank_) +
                                ": scratch holds " + std::to_string(scratch.size()) +
                                " 16-bit values for " + std::to_string(count) + " values");
  }
  if (algo == AllreduceAlgorithm::default_) algo = default_wire_allreduce_algorithm(count, wire, op);
  if (algo == AllreduceAlgorithm::ring) {
    detail::wire_ring_allreduce(handle_->comm, rank_, size_, data.data(), scratch.data(), count,
                                wire, op);
    return;
  }
  detail::narrow_from_f32(data.data(), scratch.data(), count, wire, 1);
  allreduce_uncounted(scratch.data(), scratch.data(), count, wire, op, algo);
  detail::widen_to_f32(scratch.data(), data.data(), count, wire);
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  DType type, ReduceOp op) const {
  ++issued_;
  if (recv_count == 0) return;
  const Handle& h = *handle_;
  if (send == recv) {
    throw std::invalid_argument("reduce_scatter on rank " + std::to_string(rank_) +
                                ": send and recv must be different buffers");
  }
  const std::size_t esize = dtype_bytes(type);
  const std::size_t total = recv_count * static_cast<std::size_t>(size_);
  const bool half_avg = is_half(type) && op == ReduceOp::avg;
  const MPI_Datatype dt = mpi_type(type);
  const MPI_Op mop = h.op(type, op);

  if (recv_count <= h.max_call && !(half_avg && total > kStageElements)) {
    if (half_avg) {  // fp32 sums, divided before the only rounding to 16 bits
      std::vector<float> stage(total + recv_count);
      detail::widen_to_f32(send, stage.data(), total, type);
      h.check(MPI_Reduce_scatter_block(stage.data(), stage.data() + total,
                                       static_cast<int>(recv_count), MPI_FLOAT, MPI_SUM, h.comm),
              "MPI_Reduce_scatter_block", recv_count);
      detail::narrow_from_f32(stage.data() + total, recv, recv_count, type, size_);
      return;
    }
    h.check(MPI_Reduce_scatter_block(send, recv, static_cast<int>(recv_count), dt, mop, h.comm),
            "MPI_Reduce_scatter_block", recv_count);
    if (op == ReduceOp::avg && size_ > 1) detail::divide_inplace(recv, recv_count, type, size_);
    return;
  }

  // Blocks too long for one call: one reduce per destination rank, in pieces.
  const std::size_t limit = half_avg ? std::min(h.max_call, kStageElements) : h.max_call;
  std::vector<float> stage(half_avg ? 2 * std::min(recv_count, limit) : 0);
  for (int r = 0; r < size_; ++r) {
    Handle::pieces(recv_count, limit, [&](std::size_t off, std::size_t len) {
      const std::byte* src = bytes(send) + (static_cast<std::size_t>(r) * recv_count + off) * esize;
      std::byte* dst = r == rank_ ? bytes(recv) + off * esize : nullptr;
      if (half_avg) {
        detail::widen_to_f32(src, stage.data(), len, type);
        h.check(MPI_Reduce(stage.data(), stage.data() + len, static_cast<int>(len), MPI_FLOAT,
                           MPI_SUM, r, h.comm),
                "MPI_Reduce", recv_count);
        if (dst) detail::narrow_from_f32(stage.data() + len, dst, len, type, size_);
      } else {
        h.check(MPI_Reduce(src, dst, static_cast<int>(len), dt, mop, r, h.comm), "MPI_Reduce",
                recv_count);
        if (dst && op == ReduceOp::avg && size_ > 1) detail::divide_inplace(dst, len, type, size_);
      }
    });
  }
}

void Communicator::allgather(const void* send, void* recv, std::size_t send_count,
                             DType type) const {
  ++issued_;
  if (send_count == 0) return;
  const Handle& h = *handle_;
  const std::size_t esize = dtype_bytes(type);
  std::byte* own = bytes(recv) + static_cast<std::size_t>(rank_) * send_count * esize;
  const bool in_place = send == own;
  const MPI_Datatype dt = mpi_type(type);
  if (send_count * static_cast<std::size_t>(size_) <= h.max_call) {
    h.check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(send_count), dt, recv,
                          static_cast<int>(send_count), dt, h.comm),
            "MPI_Allgather", send_count);
    return;
  }
  if (!in_place) std::memcpy(own, send, send_count * esize);
  for (int r = 0; r < size_; ++r) {
    std::byte* block = bytes(recv) + static_cast<std::size_t>(r) * send_count * esize;
    Handle::pieces(send_count, h.max_call, [&](std::size_t off, std::size_t len) {
      h.check(MPI_Bcast(block + off * esize, static_cast<int>(len), dt, r, h.comm),
              "MPI_Bcast (allgather)", send_count);
    });
  }
}

void Communicator::allgatherv(const void* send, std::size_t send_count, void* recv,
                              std::span<const std::size_t> recv_counts, DType type) const {
  ++issued_;
  const Handle& h = *handle_;
  const std::vector<std::size_t> displs =
      allgatherv_displacements("allgatherv", rank_, size_, send_count, recv_counts);
  const std::size_t total = displs.back() + recv_counts.back();
  if (total == 0) return;
  const std::size_t esize = dtype_bytes(type);
  const MPI_Datatype dt = mpi_type(type);
  std::byte* own = bytes(recv) + displs[static_cast<std::size_t>(rank_)] * esize;
  const bool in_place = send == own;
  if (total <= h.max_call) {
    std::vector<int> counts(recv_counts.size());
    std::vector<int> offsets(recv_counts.size());
    for (std::size_t r = 0; r < recv_counts.size(); ++r) {
      counts[r] = static_cast<int>(recv_counts[r]);
      offsets[r] = static_cast<int>(displs[r]);
    }
    h.check(MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, static_cast<int>(send_count), dt,
                           recv, counts.data(), offsets.data(), dt, h.comm),
            "MPI_Allgatherv", send_count);
    return;
  }
  if (!in_place && send_count > 0) std::memcpy(own, send, send_count * esize);
  for (int r = 0; r < size_; ++r) {
    std::byte* block = bytes(recv) + displs[static_cast<std::size_t>(r)] * esize;
    Handle::pieces(recv_counts[static_cast<std::size_t>(r)], h.max_call,
                   [&](std::size_t off, std::size_t len) {
                     h.check(MPI_Bcast(block + off * esize, static_cast<int>(len), dt, r, h.comm),
                             "MPI_Bcast (allgatherv)", send_count);
                   });
  }
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

void Communicator::gather(const void* send, void* recv, std::size_t send_count, DType type,
                          int root) const {
  ++issued_;
  const Handle& h = *handle_;
  h.check_root("MPI_Gather", root, send_count);
  if (send_count == 0) return;
  const std::size_t esize = dtype_bytes(type);
  const MPI_Datatype dt = mpi_type(type);
  const bool is_root = rank_ == root;
  std::byte* own = is_root ? bytes(recv) + static_cast<std::size_t>(root) * send_count * esize
                           : nullptr;
  const bool in_place = is_root && send == own;
  if (send_count * static_cast<std::size_t>(size_) <= h.max_call) {
    h.check(MPI_Gather(in_place ? MPI_IN_PLACE : send, static_cast<int>(send_count), dt, recv,
                       static_cast<int>(send_count), dt, root, h.comm),
            "MPI_Gather", send_count);
    return;
  }
  // Too long for one call: point-to-point pieces to the root.
  if (!is_root) {
    Handle::pieces(send_count, h.max_call, [&](std::size_t off, std::size_t len) {
      h.check(MPI_Send(bytes(send) + off * esize, static_cast<int>(len), dt, root, kGatherTag,
                       h.comm),
              "MPI_Send (gather)", send_count);
    });
    return;
  }
  std::vector<MPI_Request> reqs;
  for (int r = 0; r < size_; ++r) {
    if (r == root) continue;
    std::byte* block = bytes(recv) + static_cast<std::size_t>(r) * send_count * esize;
    Handle::pieces(send_count, h.max_call, [&](std::size_t off, std::size_t len) {
      MPI_Request req = MPI_REQUEST_NULL;
      h.check(MPI_Irecv(block + off * esize, static_cast<int>(len), dt, r, kGatherTag, h.comm,
                        &req),
              "MPI_Irecv (gather)", send_count);
      reqs.push_back(req);
    });
  }
  if (!in_place) std::memcpy(own, send, send_count * esize);
  h.check(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall (gather)", send_count);
}

// ---- nonblocking collectives --------------------------------------------------------------------

namespace {

std::unique_ptr<Request::State> new_state(int rank, std::string call, std::size_t count) {
  auto state = std::make_unique<Request::State>();
  state->rank = rank;
  state->call = std::move(call);
  state->count = count;
  return state;
}

}  // namespace

Request Communicator::ibarrier() const {
  ++issued_;
  auto state = new_state(rank_, "MPI_Ibarrier", 0);
  state->reqs.emplace_back();
  handle_->check(MPI_Ibarrier(handle_->comm, &state->reqs.back()), "MPI_Ibarrier", 0);
  return Request(std::move(state));
}

Request Communicator::ibroadcast(void* data, std::size_t count, DType type, int root) const {
  ++issued_;
  const Handle& h = *handle_;
  h.check_root("MPI_Ibcast", root, count);
  auto state = new_state(rank_, "MPI_Ibcast", count);
  const std::size_t esize = dtype_bytes(type);
  Handle::pieces(count, h.max_call, [&](std::size_t off, std::size_t len) {
    state->reqs.emplace_back();
    h.check(MPI_Ibcast(bytes(data) + off * esize, static_cast<int>(len), mpi_type(type), root,
                       h.comm, &state->reqs.back()),
            "MPI_Ibcast", count);
  });
  return Request(std::move(state));
}

Request Communicator::iallreduce(const void* send, void* recv, std::size_t count, DType type,
                                 ReduceOp op, AllreduceAlgorithm algo) const {
  if (algo == AllreduceAlgorithm::ring) {  // why: see the header
    throw std::invalid_argument(
        "iallreduce on rank " + std::to_string(rank_) + " (count " + std::to_string(count) +
        "): the ring algorithm has no nonblocking form (its rounds would advance only inside "
        "this request's test()/wait()); use algorithm mpi or default, or run the blocking "
        "allreduce with the ring on a CommStream to overlap it");
  }
  ++issued_;
  if (count == 0) return Request();
  const Handle& h = *handle_;
  auto state = new_state(rank_, "MPI_Iallreduce", count);
  const std::size_t esize = dtype_bytes(type);
  const int size = size_;
  if (is_half(type) && op == ReduceOp::avg) {
    Request::State* st = state.get();
    st->stage.resize(count);
    detail::widen_to_f32(send, st->stage.data(), count, type);
    Handle::pieces(count, h.max_call, [&](std::size_t off, std::size_t len) {
      st->reqs.emplace_back();
      h.check(MPI_Iallreduce(MPI_IN_PLACE, st->stage.data() + off, static_cast<int>(len),
                             MPI_FLOAT, MPI_SUM, h.comm, &st->reqs.back()),
              "MPI_Iallreduce", count);
    });
    st->finish = [st, recv, count, type, size] {
      detail::narrow_from_f32(st->stage.data(), recv, count, type, size);
    };
    return Request(std::move(state));
  }
  const bool in_place = send == recv;
  const MPI_Datatype dt = mpi_type(type);
  const MPI_Op mop = h.op(type, op);
  Handle::pieces(count, h.max_call, [&](std::size_t off, std::size_t len) {
    state->reqs.emplace_back();
    h.check(MPI_Iallreduce(in_place ? MPI_IN_PLACE : bytes(send) + off * esize,
                           bytes(recv) + off * esize, static_cast<int>(len), dt, mop, h.comm,
                           &state->reqs.back()),
            "MPI_Iallreduce", count);
  });
  if (op == ReduceOp::avg && size > 1) {
    state->finish = [recv, count, type, size] {
      detail::divide_inplace(recv, count, type, size);
    };
  }
  return Request(std::move(state));
}

Request Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                      DType type, ReduceOp op) const {
  ++issued_;
  if (recv_count == 0) return Request();
  const Handle& h = *handle_;
  if (send == recv) {
    throw std::invalid_argument("ireduce_scatter on rank " + std::to_string(rank_) +
                                ": send and recv must be different buffers");
  }
  auto state = new_state(rank_, "MPI_Ireduce_scatter_block", recv_count);
  Request::State* st = state.get();
  const std::size_t esize = dtype_bytes(type);
  const std::size_t total = recv_count * static_cast<std::size_t>(size_);
  const int size = size_;
  const bool half_avg = is_half(type) && op == ReduceOp::avg;
  // 16-bit averages reduce fp32 copies: stage = [send widened (total) | result (recv_count)].
  const void* in = send;
  void* out = recv;
  MPI_Datatype dt = mpi_type(type);
  MPI_Op mop = h.op(type, op);
  std::size_t in_esize = esize;
  if (half_avg) {
    st->stage.resize(total + recv_count);
    detail::widen_to_f32(send, st->stage.data(), total, type);
    in = st->stage.data();
    out = st->stage.data() + total;
    dt = MPI_FLOAT;
    mop = MPI_SUM;
    in_esize = sizeof(float);
  }
  if (recv_count <= h.max_call) {
    st->reqs.emplace_back();
    h.check(MPI_Ireduce_scatter_block(in, out, static_cast<int>(recv_count), dt, mop, h.comm,
                                      &st->reqs.back()),
            "MPI_Ireduce_scatter_block", recv_count);
  } else {
    st->call = "MPI_Ireduce";
    for (int r = 0; r < size_; ++r) {
      Handle::pieces(recv_count, h.max_call, [&](std::size_t off, std::size_t len) {
        st->reqs.emplace_back();
        const std::byte* src =
            bytes(in) + (static_cast<std::size_t>(r) * recv_count + off) * in_esize;
        std::byte* dst = r == rank_ ? bytes(out) + off * in_esize : nullptr;
        h.check(MPI_Ireduce(src, dst, static_cast<int>(len), dt, mop, r, h.comm,
                            &st->reqs.back()),
                "MPI_Ireduce", recv_count);
      });
    }
  }
  if (half_avg) {
    st->finish = [st, recv, recv_count, total, type, size] {
      detail::narrow_from_f32(st->stage.data() + total, recv, recv_count, type, size);
    };
  } else if (op == ReduceOp::avg && size > 1) {
    st->finish = [recv, recv_count, type, size] {
      detail::divide_inplace(recv, recv_count, type, size);
    };
  }
  return Request(std::move(state));
}

Request Communicator::iallgather(const void* send, void* recv, std::size_t send_count,
                                 DType type) const {
  ++issued_;
  if (send_count == 0) return Request();
  const Handle& h = *handle_;
  auto state = new_state(rank_, "MPI_Iallgather", send_count);
  const std::size_t esize = dtype_bytes(type);
  std::byte* own = bytes(recv) + static_cast<std::size_t>(rank_) * send_count * esize;
  const bool in_place = send == own;
  const MPI_Datatype dt = mpi_type(type);
  if (send_count * static_cast<std::size_t>(size_) <= h.max_call) {
    state->reqs.emplace_back();
    h.check(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(send_count), dt,
                           recv, static_cast<int>(send_count), dt, h.comm, &state->reqs.back()),
            "MPI_Iallgather", send_count);
    return Request(std::move(state));
  }
  state->call = "MPI_Ibcast (iallgather)";
  if (!in_place) std::memcpy(own, send, send_count * esize);
  for (int r = 0; r < size_; ++r) {
    std::byte* block = bytes(recv) + static_cast<std::size_t>(r) * send_count * esize;
    Handle::pieces(send_count, h.max_call, [&](std::size_t off, std::size_t len) {
      state->reqs.emplace_back();
      h.check(MPI_Ibcast(block + off * esize, static_cast<int>(len), dt, r, h.comm,
                         &state->reqs.back()),
              "MPI_Ibcast (iallgather)", send_count);
    });
  }
  return Request(std::move(state));
}

Request Communicator::iallgatherv(const void* send, std::size_t send_count, void* recv,
                                  std::span<const std::size_t> recv_counts, DType type) const {
  ++issued_;
  const Handle& h = *handle_;
  const std::vector<std::size_t> displs =
      allgatherv_displacements("iallgatherv", rank_, size_, send_count, recv_counts);
  const std::size_t total = displs.back() + recv_counts.back();
  if (total == 0) return Request();
  auto state = new_state(rank_, "MPI_Iallgatherv", send_count);
  Request::State* st = state.get();
  const std::size_t esize = dtype_bytes(type);
  const MPI_Datatype dt = mpi_type(type);
  std::byte* own = bytes(recv) + displs[static_cast<std::size_t>(rank_)] * esize;
  const bool in_place = send == own;
  if (total <= h.max_call) {
    // MPI reads the count and displacement arrays until the request completes: the state
    // owns them.
    st->counts.resize(recv_counts.size());
    st->displs.resize(recv_counts.size());
    for (std::size_t r = 0; r < recv_counts.size(); ++r) {
      st->counts[r] = static_cast<int>(recv_counts[r]);
      st->displs[r] = static_cast<int>(displs[r]);
    }
    st->reqs.emplace_back();
    h.check(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, static_cast<int>(send_count), dt,
                            recv, st->counts.data(), st->displs.data(), dt, h.comm,
                            &st->reqs.back()),
            "MPI_Iallgatherv", send_count);
    return Request(std::move(state));
  }
  st->call = "MPI_Ibcast (iallgatherv)";
  if (!in_place && send_count > 0) std::memcpy(own, send, send_count * esize);
  for (int r = 0; r < size_; ++r) {
    std::byte* block = bytes(recv) + displs[static_cast<std::size_t>(r)] * esize;
    Handle::pieces(recv_counts[static_cast<std::size_t>(r)], h.max_call,
                   [&](std::size_t off, std::size_t len) {
                     st->reqs.emplace_back();
                     h.check(MPI_Ibcast(block + off * esize, static_cast<int>(len), dt, r, h.comm,
                                        &st->reqs.back()),
                             "MPI_Ibcast (iallgatherv)", send_count);
                   });
  }
  return Request(std::move(state));
}

Request Communicator::igather(const void* send, void* recv, std::size_t send_count, DType type,
                              int root) const {
  ++issued_;
  const Handle& h = *handle_;
  h.check_root("MPI_Igather", root, send_count);
  if (send_count == 0) return Request();
  auto state = new_state(rank_, "MPI_Igather", send_count);
  Request::State* st = state.get();
  const std::size_t esize = dtype_bytes(type);
  const MPI_Datatype dt = mpi_type(type);
  const bool is_root = rank_ == root;
  std::byte* own = is_root ? bytes(recv) + static_cast<std::size_t>(root) * send_count * esize
                           : nullptr;
  const bool in_place = is_root && send == own;
  if (send_count * static_cast<std::size_t>(size_) <= h.max_call) {
    st->reqs.emplace_back();
    h.check(MPI_Igather(in_place ? MPI_IN_PLACE : send, static_cast<int>(send_count), dt, recv,
                        static_cast<int>(send_count), dt, root, h.comm, &st->reqs.back()),
            "MPI_Igather", send_count);
    return Request(std::move(state));
  }
  // Too long for one call: point-to-point pieces to the root, as gather does. Every message
  // from one rank to the root carries the same tag and is posted at issue time, so pieces
  // match in order even with other gathers in flight (MPI does not let messages overtake).
  st->call = "MPI_Isend/MPI_Irecv (igather)";
  if (!is_root) {
    Handle::pieces(send_count, h.max_call, [&](std::size_t off, std::size_t len) {
      st->reqs.emplace_back();
      h.check(MPI_Isend(bytes(send) + off * esize, static_cast<int>(len), dt, root, kGatherTag,
                        h.comm, &st->reqs.back()),
              "MPI_Isend (igather)", send_count);
    });
    return Request(std::move(state));
  }
  for (int r = 0; r < size_; ++r) {
    if (r == root) continue;
    std::byte* block = bytes(recv) + static_cast<std::size_t>(r) * send_count * esize;
    Handle::pieces(send_count, h.max_call, [&](std::size_t off, std::size_t len) {
      st->reqs.emplace_back();
      h.check(MPI_Irecv(block + off * esize, static_cast<int>(len), dt, r, kGatherTag, h.comm,
                        &st->reqs.back()),
              "MPI_Irecv (igather)", send_count);
    });
  }
  if (!in_place) std::memcpy(own, send, send_count * esize);
  return Request(std::move(state));
}

}  // namespace mpitrain
