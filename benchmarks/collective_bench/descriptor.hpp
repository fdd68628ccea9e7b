// CollectiveDescriptor: what collective_bench needs to know about one collective, nccl-tests
// style (a descriptor per collective, one driver for all of them): the buffers for a size, how
// to fill the inputs, how to check the outputs against closed-form values, the bus-bandwidth
// factor, the algorithms offered and how to run one iteration of each.

#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain::bench {

// The element counts of one row's buffers.
struct Layout {
  std::size_t count = 0;       // elements of the whole buffer: the row's `count`, its size in
                               // bytes being count * element bytes
  std::size_t send_count = 0;  // elements of this rank's input
  std::size_t recv_count = 0;  // elements of the output; 0 when the call works in place
};

// The buffers of one type in a group: this rank's input and the output, in memory the
// GroupBench owns (ordinary or shared; in place, send lies inside recv).
struct Buffers {
  DType type = DType::f32;
  std::size_t esize = 0;  // bytes per element
  Layout layout;
  std::span<std::byte> send;
  std::span<std::byte> recv;
};

// One algorithm a collective offers: a name of the Communicator's table of algorithms.
struct AlgorithmName {
  std::string name;
};

// Runs one iteration of one algorithm on a group's buffers.
using Runner = std::function<void(Buffers&)>;

class CollectiveDescriptor {
 public:
  virtual ~CollectiveDescriptor() = default;

  // Returns "sum" for the reductions, "none" otherwise (the `redop` column).
  virtual std::string_view redop() const = 0;
  // Returns the element counts for a payload of about `nominal_count` elements (>= 1) on
  // `nranks` ranks.
  virtual Layout layout(std::size_t nominal_count, int nranks) const = 0;
  // Returns busbw / algbw on `nranks` ranks.
  virtual double bus_factor(int nranks) const = 0;
  // Writes rank `rank`'s closed-form input into b.send (see closed_form.hpp).
  virtual void fill(Buffers& b, int rank) const = 0;
  // Returns the number of elements of this rank's output that differ from the closed-form
  // expected values, after one run on inputs written by fill().
  virtual std::uint64_t count_wrong(const Buffers& b, int rank, int nranks) const = 0;
  // Returns where this rank's input starts in the output (elements) when the collective runs
  // in place (--in-place); nullopt when it has no in-place form.
  virtual std::optional<std::size_t> in_place_offset(const Layout& /*layout*/,
                                                     int /*rank*/) const {
    return std::nullopt;
  }

  // The algorithms: the one place that lists them (algorithms(), from the Communicator's
  // table: algorithm_names of the collective) and the one place that runs them by name
  // (runner()). "mpi", the plain MPI call, and "default" are always among them.
  virtual std::vector<AlgorithmName> algorithms() const = 0;
  // Returns the call that runs one iteration of `algo` (a name from algorithms()) on comm;
  // throws std::invalid_argument for any other name.
  virtual Runner runner(const Communicator& comm, const std::string& algo) const = 0;
};

// Returns the names the Communicator's table offers for `op` ("default" first).
std::vector<AlgorithmName> table_algorithms(mpitrain::Collective op);

// The descriptors, one per file (allreduce_descriptor.cpp, ...).
std::unique_ptr<CollectiveDescriptor> make_allreduce_descriptor();
std::unique_ptr<CollectiveDescriptor> make_reduce_scatter_descriptor();
std::unique_ptr<CollectiveDescriptor> make_allgather_descriptor();
std::unique_ptr<CollectiveDescriptor> make_broadcast_descriptor();

}  // namespace mpitrain::bench
