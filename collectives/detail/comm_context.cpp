// CommContext: the MPI objects of a Communicator, and the small lookups every MPI-based
// algorithm makes (datatype, op, checks).

#include "mpitrain/collectives/detail/comm_context.hpp"

#include <string>

#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/detail/reduce_kernels.hpp"
#include "mpitrain/collectives/detail/shm_segment.hpp"

namespace mpitrain::detail {
namespace {

// MPI user op: inout[i] = in[i] (op) inout[i] for a 16-bit format (fp32 combine, one rounding).
template <DType T, ReduceOp Op> void half_user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_inplace(inout, in, static_cast<std::size_t>(*len), T, Op);
}

// Index of a 16-bit type and of a combining op in CommContext::half_ops.
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

}  // namespace

// Frees the ops and communicators unless MPI is already finalised (then they are gone).
// Return codes are ignored: a destructor cannot report them, and nothing can be retried.
CommContext::~CommContext() {
  if (broken) {
    (void)shm.release();  // its frees are collective: a missing rank would never join them
    return;
  }
  int finalized = 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) {
    shm.reset();
    return;
  }
  watch.drain();  // a posted fingerprint comparison, which every rank posted too
  shm.reset();  // collective over the node, like the communicators below
  for (auto& ops : half_ops) {
    for (MPI_Op& op : ops) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
  if (check_comm != MPI_COMM_NULL) MPI_Comm_free(&check_comm);
  if (cross != MPI_COMM_NULL) MPI_Comm_free(&cross);
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

void CommContext::create_half_ops() {
  const std::array<std::array<MPI_User_function*, 3>, 2> fns{{
      {&half_user_op<DType::bf16, ReduceOp::sum>, &half_user_op<DType::bf16, ReduceOp::max>,
       &half_user_op<DType::bf16, ReduceOp::min>},
      {&half_user_op<DType::f16, ReduceOp::sum>, &half_user_op<DType::f16, ReduceOp::max>,
       &half_user_op<DType::f16, ReduceOp::min>},
  }};
  for (std::size_t t = 0; t < 2; ++t) {
    for (std::size_t o = 0; o < 3; ++o) {
      check(MPI_Op_create(fns[t][o], /*commute=*/1, &half_ops[t][o]), "MPI_Op_create", 0);
    }
  }
}

MPI_Datatype CommContext::mpi_type(DType type) noexcept {
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

MPI_Op CommContext::mpi_op(DType type, ReduceOp op) const noexcept {
  if (is_half(type)) return half_ops[half_index(type)][op_index(op)];
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

void CommContext::check(int rc, std::string_view call, std::size_t count) const {
  check_mpi(rc, call, rank, count);
}

void CommContext::check_root(std::string_view call, int root, std::size_t count) const {
  if (root < 0 || root >= size) {
    throw MpiError(call, rank, count, MPI_ERR_ROOT,
                   "root " + std::to_string(root) + " is not a rank of this communicator (size " +
                       std::to_string(size) + ")");
  }
}

}  // namespace mpitrain::detail
