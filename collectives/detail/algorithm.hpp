#pragma once
// Algorithm: one way of running collectives (internal to collectives/). Each algorithm is a
// class in its own file, listed once in the table of algorithm_registry.cpp; the Communicator
// looks algorithms up by name and dispatches through this interface.
//
// To add an algorithm: write its class (name, which calls it can run, how it runs them), add
// one line to the table, and test it (tests/collectives/<name>_test.cpp). Its name then
// appears in `--algo` of collective_bench, in `trainer check`, in the error messages that list
// valid names, and in distributed.allreduce_algorithm.

#include <string>
#include <string_view>

#include "mpitrain/collectives/collective.hpp"
#include "mpitrain/collectives/request.hpp"
#include "mpitrain/collectives/detail/collective_args.hpp"
#include "mpitrain/collectives/detail/comm_context.hpp"

namespace mpitrain::detail {

class Algorithm {
 public:
  virtual ~Algorithm() = default;

  // Returns the name users give ("mpi", "ring", ...): lower case, no spaces.
  virtual std::string_view name() const noexcept = 0;
  // Returns true when this algorithm implements `op` at all (lists of names come from it).
  virtual bool implements(Collective op) const noexcept = 0;
  // Returns why this algorithm cannot run `args` on `ctx` (a phrase such as "no average of
  // 16-bit types"), or an empty string when it can. Only called for implemented ops.
  virtual std::string why_not(const CollectiveArgs& args, const CommContext& ctx) const;
  // Returns why post() cannot run `args` (the algorithm has no nonblocking form for it), or
  // an empty string when it can.
  virtual std::string why_not_nonblocking(const CollectiveArgs& args) const;

  // Runs `args` to completion. Throws MpiError on an MPI failure.
  virtual void run(const CommContext& ctx, const CollectiveArgs& args) const = 0;
  // Starts `args` and returns its Request; only when why_not_nonblocking(args) is empty.
  virtual Request post(const CommContext& ctx, const CollectiveArgs& args) const;

 protected:
  // Runs an allreduce of fp32 data sent as 16 bits the generic way: rounds the data into
  // args.wire_scratch, runs the 16-bit allreduce with this algorithm, widens the result back.
  // Two conversion passes over the buffer; algorithms that fuse them override run().
  void run_wire_by_conversion(const CommContext& ctx, const CollectiveArgs& args) const;
};

}  // namespace mpitrain::detail
