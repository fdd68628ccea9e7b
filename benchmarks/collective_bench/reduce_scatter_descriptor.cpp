// reduce_scatter: every rank's whole buffer summed, rank r receiving block r of the sum. The
// buffer is whole blocks of count / n elements. One algorithm: the MPI call.

#include <algorithm>

#include "closed_form.hpp"
#include "descriptor.hpp"

namespace mpitrain::bench {
namespace {

class ReduceScatterDescriptor final : public CollectiveDescriptor {
 public:
  std::string_view redop() const override { return "sum"; }

  Layout layout(std::size_t nominal_count, int nranks) const override {
    const std::size_t n = static_cast<std::size_t>(nranks);
    const std::size_t count = std::max(n, std::max<std::size_t>(1, nominal_count) / n * n);
    return {count, count, count / n};
  }

  // Each rank sends (n-1)/n of its buffer.
  double bus_factor(int nranks) const override {
    const double n = nranks;
    return (n - 1) / n;
  }

  void fill(Buffers& b, int rank) const override {
    store_values(b.send.data(), b.layout.send_count, b.type, rank, 0);
  }

  std::uint64_t count_wrong(const Buffers& b, int rank, int nranks) const override {
    const std::size_t block = b.layout.recv_count;
    const std::size_t base = static_cast<std::size_t>(rank) * block;
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < block; ++i) {
      wrong += load(b.recv.data(), i, b.type) != expected_sum(nranks, base + i);
    }
    return wrong;
  }

  std::vector<AlgorithmName> algorithms() const override {
    return table_algorithms(mpitrain::Collective::reduce_scatter);
  }

  Runner runner(const Communicator& comm, const std::string& algo) const override {
    require_algorithm(mpitrain::Collective::reduce_scatter, algo);
    return [&comm, name = algo](Buffers& b) {
      comm.reduce_scatter(b.send.data(), b.recv.data(), b.layout.recv_count, b.type, ReduceOp::sum, name);
    };
  }
};

}  // namespace

std::unique_ptr<CollectiveDescriptor> make_reduce_scatter_descriptor() {
  return std::make_unique<ReduceScatterDescriptor>();
}

}  // namespace mpitrain::bench
