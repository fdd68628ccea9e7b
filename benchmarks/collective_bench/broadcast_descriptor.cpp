// broadcast: rank 0's buffer copied, in place, into every rank's buffer. One algorithm: the
// MPI call.

#include <algorithm>
#include <cstring>

#include "closed_form.hpp"
#include "descriptor.hpp"

namespace mpitrain::bench {
namespace {

constexpr int kRoot = 0;

class BroadcastDescriptor final : public CollectiveDescriptor {
 public:
  std::string_view redop() const override { return "none"; }

  // In place: the buffer is both input and output (recv_count 0).
  Layout layout(std::size_t nominal_count, int /*nranks*/) const override {
    const std::size_t count = std::max<std::size_t>(1, nominal_count);
    return {count, count, 0};
  }

  // Each rank receives the whole buffer once.
  double bus_factor(int /*nranks*/) const override { return 1.0; }

  // The root writes its values; every other rank NaN (all bits set, in every float type), so a
  // receiver that kept its own buffer is counted wrong.
  void fill(Buffers& b, int rank) const override {
    if (rank != kRoot) {
      std::memset(b.send.data(), 0xff, b.send.size());
      return;
    }
    store_values(b.send.data(), b.layout.send_count, b.type, rank, 0);
  }

  std::uint64_t count_wrong(const Buffers& b, int /*rank*/, int /*nranks*/) const override {
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < b.layout.count; ++i) {
      wrong += load(b.send.data(), i, b.type) != value(kRoot, i);
    }
    return wrong;
  }

  std::vector<AlgorithmName> algorithms() const override {
    return table_algorithms(mpitrain::Collective::broadcast);
  }

  Runner runner(const Communicator& comm, const std::string& algo) const override {
    require_algorithm(mpitrain::Collective::broadcast, algo);
    return [&comm, name = algo](Buffers& b) {
      comm.broadcast(b.send.data(), b.layout.count, b.type, kRoot, name);
    };
  }
};

}  // namespace

std::unique_ptr<CollectiveDescriptor> make_broadcast_descriptor() {
  return std::make_unique<BroadcastDescriptor>();
}

}  // namespace mpitrain::bench
