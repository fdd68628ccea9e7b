#pragma once
// MpiEmitter: the MPI calls of one collective are written once, as a plan that issues them to
// an emitter; the blocking emitter makes each call at once (MPI_Allreduce, ...), the posting
// emitter starts its nonblocking twin (MPI_Iallreduce, ...) and collects the requests into a
// Request (internal to collectives/).
//
// A plan may stage data (stage(): fp32 scratch for 16-bit averages) and register work that
// must follow the calls made so far (then(): divisions, conversions back). The blocking
// emitter runs that work at once and reuses one staging buffer; the posting emitter keeps
// every staging buffer and runs the work, in order, when the Request completes.
//
// Every count handed to an emitter is at most ctx.max_call (plans split longer buffers). A
// plan that is to be posted must issue calls that do not depend on each other's results:
// posted calls may progress in any order (reduce_bcast, whose broadcast reads what its
// reduce wrote, is therefore blocking only).

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/collectives/collective.hpp"
#include "mpitrain/collectives/request.hpp"
#include "mpitrain/collectives/detail/comm_context.hpp"

namespace mpitrain::detail {

class MpiEmitter {
 public:
  // `op` names the collective in error messages; `count` is the caller's element count.
  MpiEmitter(const CommContext& ctx, Collective op, std::size_t count)
      : ctx_(ctx), op_(op), count_(count) {}
  virtual ~MpiEmitter() = default;
  MpiEmitter(const MpiEmitter&) = delete;
  MpiEmitter& operator=(const MpiEmitter&) = delete;

  const CommContext& context() const noexcept { return ctx_; }

  // send may be MPI_IN_PLACE where MPI allows it. Lengths are in elements of the datatype.
  virtual void allreduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                         MPI_Op op) = 0;
  virtual void bcast(void* data, std::size_t len, MPI_Datatype dt, int root) = 0;
  virtual void reduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt, MPI_Op op,
                      int root) = 0;
  virtual void reduce_scatter_block(const void* send, void* recv, std::size_t len,
                                    MPI_Datatype dt, MPI_Op op) = 0;
  virtual void allgather(const void* send, void* recv, std::size_t len, MPI_Datatype dt) = 0;
  virtual void allgatherv(const void* send, std::size_t len, void* recv, std::vector<int> counts,
                          std::vector<int> displs, MPI_Datatype dt) = 0;
  virtual void gather(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                      int root) = 0;
  virtual void send(const void* data, std::size_t len, MPI_Datatype dt, int peer, int tag) = 0;
  virtual void recv(void* data, std::size_t len, MPI_Datatype dt, int peer, int tag) = 0;
  virtual void barrier() = 0;
  // Returns fp32 scratch of `len` values, valid until the work registered with then() after
  // the next calls has run.
  virtual float* stage(std::size_t len) = 0;
  // Runs `fn` once every call issued so far has completed.
  virtual void then(std::function<void()> fn) = 0;

 protected:
  // Returns "MPI_Bcast" when `natural` is this emitter's collective, else "MPI_Bcast
  // (allgather)": the call, and the collective it serves when that is not obvious.
  std::string label(std::string_view mpi_call, Collective natural) const;
  void check(int rc, std::string_view mpi_call, Collective natural) const;

  const CommContext& ctx_;
  Collective op_;
  std::size_t count_;
};

class PostingEmitter;

// Makes every call at once (with a timeout: posts it and waits within the deadline).
class BlockingEmitter final : public MpiEmitter {
 public:
  using MpiEmitter::MpiEmitter;
  void allreduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                 MPI_Op op) override;
  void bcast(void* data, std::size_t len, MPI_Datatype dt, int root) override;
  void reduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt, MPI_Op op,
              int root) override;
  void reduce_scatter_block(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                            MPI_Op op) override;
  void allgather(const void* send, void* recv, std::size_t len, MPI_Datatype dt) override;
  void allgatherv(const void* send, std::size_t len, void* recv, std::vector<int> counts,
                  std::vector<int> displs, MPI_Datatype dt) override;
  void gather(const void* send, void* recv, std::size_t len, MPI_Datatype dt, int root) override;
  void send(const void* data, std::size_t len, MPI_Datatype dt, int peer, int tag) override;
  void recv(void* data, std::size_t len, MPI_Datatype dt, int peer, int tag) override;
  void barrier() override;
  float* stage(std::size_t len) override;
  void then(std::function<void()> fn) override { fn(); }

 private:
  // Issues one call through a PostingEmitter (post(emitter)) and waits for it.
  template <class Post> void post_and_wait(Post&& post);

  std::vector<float> stage_;
};

// Starts every call's nonblocking twin; finish() hands the requests over as a Request.
class PostingEmitter final : public MpiEmitter {
 public:
  PostingEmitter(const CommContext& ctx, Collective op, std::size_t count);
  ~PostingEmitter() override;
  void allreduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                 MPI_Op op) override;
  void bcast(void* data, std::size_t len, MPI_Datatype dt, int root) override;
  void reduce(const void* send, void* recv, std::size_t len, MPI_Datatype dt, MPI_Op op,
              int root) override;
  void reduce_scatter_block(const void* send, void* recv, std::size_t len, MPI_Datatype dt,
                            MPI_Op op) override;
  void allgather(const void* send, void* recv, std::size_t len, MPI_Datatype dt) override;
  void allgatherv(const void* send, std::size_t len, void* recv, std::vector<int> counts,
                  std::vector<int> displs, MPI_Datatype dt) override;
  void gather(const void* send, void* recv, std::size_t len, MPI_Datatype dt, int root) override;
  void send(const void* data, std::size_t len, MPI_Datatype dt, int peer, int tag) override;
  void recv(void* data, std::size_t len, MPI_Datatype dt, int peer, int tag) override;
  void barrier() override;
  float* stage(std::size_t len) override;
  void then(std::function<void()> fn) override;

  // Returns the Request of everything posted (complete at once when nothing was).
  Request finish();

 private:
  MPI_Request* next_request(std::string_view mpi_call);
  std::unique_ptr<Request::State> state_;
};

}  // namespace mpitrain::detail
