// allgather: rank r's block of count / n elements lands at block r of every rank's output.
// One algorithm: the MPI call.

#include <algorithm>

#include "closed_form.hpp"
#include "descriptor.hpp"

namespace mpitrain::bench {
namespace {

class AllgatherDescriptor final : public CollectiveDescriptor {
 public:
  std::string_view redop() const override { return "none"; }

  Layout layout(std::size_t nominal_count, int nranks) const override {
    const std::size_t n = static_cast<std::size_t>(nranks);
    const std::size_t count = std::max(n, std::max<std::size_t>(1, nominal_count) / n * n);
    return {count, count / n, count};
  }

  // In place rank r's input is block r of the output (ZeRO stage 1's parameter allgather).
  std::optional<std::size_t> in_place_offset(const Layout& layout, int rank) const override {
    return static_cast<std::size_t>(rank) * layout.send_count;
  }

  // Each rank receives (n-1)/n of the output.
  double bus_factor(int nranks) const override {
    const double n = nranks;
    return (n - 1) / n;
  }

  // Rank r sends the elements its block holds in the output: v(r, r * block + i).
  void fill(Buffers& b, int rank) const override {
    const std::size_t block = b.layout.send_count;
    store_values(b.send.data(), block, b.type, rank, static_cast<std::size_t>(rank) * block);
  }

  std::uint64_t count_wrong(const Buffers& b, int /*rank*/, int /*nranks*/) const override {
    const std::size_t block = b.layout.send_count;
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < b.layout.count; ++i) {
      wrong += load(b.recv.data(), i, b.type) != value(static_cast<int>(i / block), i);
    }
    return wrong;
  }

  std::vector<AlgorithmName> algorithms() const override {
    return table_algorithms(mpitrain::Collective::allgather);
  }

  Runner runner(const Communicator& comm, const std::string& algo) const override {
    require_algorithm(mpitrain::Collective::allgather, algo);
    return [&comm, name = algo](Buffers& b) {
      comm.allgather(b.send.data(), b.recv.data(), b.layout.send_count, b.type, name);
    };
  }
};

}  // namespace

std::unique_ptr<CollectiveDescriptor> make_allgather_descriptor() {
  return std::make_unique<AllgatherDescriptor>();
}

}  // namespace mpitrain::bench
