// The two emitters of an MPI plan: blocking calls, or their nonblocking twins collected into a
// Request. Each call is checked; a failure throws MpiError naming the call (and the collective
// it serves), the rank and the caller's count.

#include "mpitrain/collectives/detail/mpi_plan.hpp"

#include <utility>

#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/detail/request_state.hpp"

namespace mpitrain::detail {

std::string MpiEmitter::label(std::string_view mpi_call, Collective natural) const {
  std::string out(mpi_call);
  if (natural != op_) out += " (" + std::string(to_string(op_)) + ")";
  return out;
}

void MpiEmitter::check(int rc, std::string_view mpi_call, Collective natural) const {
  if (rc != MPI_SUCCESS) check_mpi(rc, label(mpi_call, natural), ctx_.rank, count_);
}

// ---- BlockingEmitter ----------------------------------------------------------------------
// With a timeout, each call is its nonblocking twin waited for within the deadline (a
// blocking MPI call cannot be interrupted); bounded_wait.hpp throws WaitExpired past it.

template <class Post> void BlockingEmitter::post_and_wait(Post&& post) {
  PostingEmitter posting(ctx_, op_, count_);
  post(posting);
  posting.finish().wait();
}

void BlockingEmitter::allreduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                                MPI_Op op) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.allreduce(send, recv, len, dt, op); });
  check(MPI_Allreduce(send, recv, static_cast<int>(len), dt, op, ctx_.comm), "MPI_Allreduce",
        Collective::allreduce);
}

void BlockingEmitter::bcast(void* data, std::size_t len, MPI_Datatype dt, int root) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.bcast(data, len, dt, root); });
  check(MPI_Bcast(data, static_cast<int>(len), dt, root, ctx_.comm), "MPI_Bcast",
        Collective::broadcast);
}

void BlockingEmitter::reduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                             MPI_Op op, int root) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.reduce(send, recv, len, dt, op, root); });
  check(MPI_Reduce(send, recv, static_cast<int>(len), dt, op, root, ctx_.comm), "MPI_Reduce",
        Collective::reduce_scatter);
}

void BlockingEmitter::reduce_scatter_block(const void* send, void* recv, std::size_t len,
                                           MPI_Datatype dt, MPI_Op op) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.reduce_scatter_block(send, recv, len, dt, op); });
  check(MPI_Reduce_scatter_block(send, recv, static_cast<int>(len), dt, op, ctx_.comm),
        "MPI_Reduce_scatter_block", Collective::reduce_scatter);
}

void BlockingEmitter::allgather(const void* send, void* recv, std::size_t len, MPI_Datatype dt) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.allgather(send, recv, len, dt); });
  check(MPI_Allgather(send, static_cast<int>(len), dt, recv, static_cast<int>(len), dt,
                      ctx_.comm),
        "MPI_Allgather", Collective::allgather);
}

void BlockingEmitter::allgatherv(const void* send, std::size_t len, void* recv,
                                 std::vector<int> counts, std::vector<int> displs,
                                 MPI_Datatype dt) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.allgatherv(send, len, recv, std::move(counts), std::move(displs), dt); });
  check(MPI_Allgatherv(send, static_cast<int>(len), dt, recv, counts.data(), displs.data(), dt,
                       ctx_.comm),
        "MPI_Allgatherv", Collective::allgatherv);
}

void BlockingEmitter::gather(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                             int root) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.gather(send, recv, len, dt, root); });
  check(MPI_Gather(send, static_cast<int>(len), dt, recv, static_cast<int>(len), dt, root,
                   ctx_.comm),
        "MPI_Gather", Collective::gather);
}

void BlockingEmitter::send(const void* data, std::size_t len, MPI_Datatype dt, int peer,
                           int tag) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.send(data, len, dt, peer, tag); });
  check(MPI_Send(data, static_cast<int>(len), dt, peer, tag, ctx_.comm), "MPI_Send",
        Collective::barrier);
}

void BlockingEmitter::recv(void* data, std::size_t len, MPI_Datatype dt, int peer, int tag) {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.recv(data, len, dt, peer, tag); });
  check(MPI_Recv(data, static_cast<int>(len), dt, peer, tag, ctx_.comm, MPI_STATUS_IGNORE),
        "MPI_Recv", Collective::barrier);
}

void BlockingEmitter::barrier() {
  if (ctx_.timeout.count() > 0) return post_and_wait([&](PostingEmitter& p) { p.barrier(); });
  check(MPI_Barrier(ctx_.comm), "MPI_Barrier", Collective::barrier);
}

float* BlockingEmitter::stage(std::size_t len) {
  if (stage_.size() < len) stage_.resize(len);
  return stage_.data();
}

// ---- PostingEmitter -----------------------------------------------------------------------

PostingEmitter::PostingEmitter(const CommContext& ctx, Collective op, std::size_t count)
    : MpiEmitter(ctx, op, count), state_(std::make_unique<Request::State>()) {
  state_->rank = ctx.rank;
  state_->count = count;
  state_->timeout = ctx.timeout;
}

// A plan that threw after posting leaves requests MPI still writes into buffers the state
// owns: wait for them before those buffers go (errors are dropped; the plan's own is thrown).
PostingEmitter::~PostingEmitter() {
  if (state_ && !state_->reqs.empty()) {
    MPI_Waitall(static_cast<int>(state_->reqs.size()), state_->reqs.data(), MPI_STATUSES_IGNORE);
  }
}

MPI_Request* PostingEmitter::next_request(std::string_view mpi_call) {
  if (state_->call.empty()) state_->call = label(mpi_call, op_);
  state_->reqs.push_back(MPI_REQUEST_NULL);
  return &state_->reqs.back();
}

void PostingEmitter::allreduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                               MPI_Op op) {
  check(MPI_Iallreduce(send, recv, static_cast<int>(len), dt, op, ctx_.comm,
                       next_request("MPI_Iallreduce")),
        "MPI_Iallreduce", Collective::allreduce);
}

void PostingEmitter::bcast(void* data, std::size_t len, MPI_Datatype dt, int root) {
  check(MPI_Ibcast(data, static_cast<int>(len), dt, root, ctx_.comm, next_request("MPI_Ibcast")),
        "MPI_Ibcast", Collective::broadcast);
}

void PostingEmitter::reduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                            MPI_Op op, int root) {
  check(MPI_Ireduce(send, recv, static_cast<int>(len), dt, op, root, ctx_.comm,
                    next_request("MPI_Ireduce")),
        "MPI_Ireduce", Collective::reduce_scatter);
}

void PostingEmitter::reduce_scatter_block(const void* send, void* recv, std::size_t len,
                                          MPI_Datatype dt, MPI_Op op) {
  check(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(len), dt, op, ctx_.comm,
                                  next_request("MPI_Ireduce_scatter_block")),
        "MPI_Ireduce_scatter_block", Collective::reduce_scatter);
}

void PostingEmitter::allgather(const void* send, void* recv, std::size_t len, MPI_Datatype dt) {
  check(MPI_Iallgather(send, static_cast<int>(len), dt, recv, static_cast<int>(len), dt,
                       ctx_.comm, next_request("MPI_Iallgather")),
        "MPI_Iallgather", Collective::allgather);
}

void PostingEmitter::allgatherv(const void* send, std::size_t len, void* recv,
                                std::vector<int> counts, std::vector<int> displs,
                                MPI_Datatype dt) {
  // MPI reads the count and displacement arrays until the request completes: the state
  // owns them.
  state_->int_arrays.push_back(std::move(counts));
  const int* c = state_->int_arrays.back().data();
  state_->int_arrays.push_back(std::move(displs));
  const int* d = state_->int_arrays.back().data();
  check(MPI_Iallgatherv(send, static_cast<int>(len), dt, recv, c, d, dt, ctx_.comm,
                        next_request("MPI_Iallgatherv")),
        "MPI_Iallgatherv", Collective::allgatherv);
}

void PostingEmitter::gather(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                            int root) {
  check(MPI_Igather(send, static_cast<int>(len), dt, recv, static_cast<int>(len), dt, root,
                    ctx_.comm, next_request("MPI_Igather")),
        "MPI_Igather", Collective::gather);
}

void PostingEmitter::send(const void* data, std::size_t len, MPI_Datatype dt, int peer,
                          int tag) {
  check(MPI_Isend(data, static_cast<int>(len), dt, peer, tag, ctx_.comm,
                  next_request("MPI_Isend")),
        "MPI_Isend", Collective::barrier);
}

void PostingEmitter::recv(void* data, std::size_t len, MPI_Datatype dt, int peer, int tag) {
  check(MPI_Irecv(data, static_cast<int>(len), dt, peer, tag, ctx_.comm,
                  next_request("MPI_Irecv")),
        "MPI_Irecv", Collective::barrier);
}

void PostingEmitter::barrier() {
  check(MPI_Ibarrier(ctx_.comm, next_request("MPI_Ibarrier")), "MPI_Ibarrier",
        Collective::barrier);
}

float* PostingEmitter::stage(std::size_t len) {
  state_->stages.push_back(std::make_unique_for_overwrite<float[]>(len));
  return state_->stages.back().get();
}

void PostingEmitter::then(std::function<void()> fn) { state_->finishers.push_back(std::move(fn)); }

Request PostingEmitter::finish() {
  if (state_->reqs.empty() && state_->finishers.empty()) {
    state_.reset();
    return Request();
  }
  return Request(std::move(state_));
}

}  // namespace mpitrain::detail
