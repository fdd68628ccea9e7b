// allreduce: every rank's whole buffer summed into every rank's output. Algorithms: every
// allreduce algorithm of the Communicator's table (default, mpi, ring, ...).

#include <algorithm>
#include <stdexcept>

#include "closed_form.hpp"
#include "descriptor.hpp"

namespace mpitrain::bench {
namespace {

class AllreduceDescriptor final : public CollectiveDescriptor {
 public:
  std::string_view redop() const override { return "sum"; }

  Layout layout(std::size_t nominal_count, int /*nranks*/) const override {
    const std::size_t count = std::max<std::size_t>(1, nominal_count);
    return {count, count, count};
  }

  // In place the buffer is both input and output (the engine's buckets).
  std::optional<std::size_t> in_place_offset(const Layout& /*layout*/, int /*rank*/) const override {
    return 0;
  }

  // Each rank sends and receives 2 (n-1)/n of the buffer in a bandwidth-optimal allreduce.
  double bus_factor(int nranks) const override {
    const double n = nranks;
    return 2.0 * (n - 1) / n;
  }

  void fill(Buffers& b, int rank) const override {
    store_values(b.send.data(), b.layout.send_count, b.type, rank, 0);
  }

  std::uint64_t count_wrong(const Buffers& b, int /*rank*/, int nranks) const override {
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < b.layout.count; ++i) {
      wrong += load(b.recv.data(), i, b.type) != expected_sum(nranks, i);
    }
    return wrong;
  }

  std::vector<AlgorithmName> algorithms() const override {
    return table_algorithms(mpitrain::Collective::allreduce);
  }

  Runner runner(const Communicator& comm, const std::string& algo) const override {
    require_algorithm(mpitrain::Collective::allreduce, algo);
    return [&comm, name = algo](Buffers& b) {
      comm.allreduce(b.send.data(), b.recv.data(), b.layout.count, b.type, ReduceOp::sum, name);
    };
  }
};

}  // namespace

std::unique_ptr<CollectiveDescriptor> make_allreduce_descriptor() {
  return std::make_unique<AllreduceDescriptor>();
}

}  // namespace mpitrain::bench
