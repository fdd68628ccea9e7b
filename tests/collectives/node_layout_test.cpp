// Communicator's node layout against the launch's: MPITRAIN_TEST_NODES nodes (1 when unset: a
// plain mpiexec on this machine), the ranks placed in blocks of equal size (mpiexec's default
// by-slot mapping: ranks 0..k-1 on the first node, k..2k-1 on the second, ...). The multinode
// label runs it across simulated nodes (scripts/sim_cluster.sh) with MPITRAIN_TEST_NODES set,
// where each node has a host name of its own: ranks agree on a node exactly when they agree on
// the host name.

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

// Returns the number of nodes the launch placed the ranks on.
int expected_nodes() {
  const char* text = std::getenv("MPITRAIN_TEST_NODES");
  if (text == nullptr) return 1;
  const int nodes = std::atoi(text);
  EXPECT_GT(nodes, 0) << "MPITRAIN_TEST_NODES='" << text << "'";
  return nodes;
}

class NodeLayoutTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;  // adopts the MPI of the test main
  Communicator comm_{runtime_};
};

TEST_F(NodeLayoutTest, NodeCountLocalRanksAndNodeIndices) {
  const int nodes = expected_nodes();
  ASSERT_EQ(comm_.size() % nodes, 0) << "the launch places as many ranks on every node";
  const int per_node = comm_.size() / nodes;
  EXPECT_EQ(comm_.node_count(), nodes);
  EXPECT_EQ(comm_.local_size(), per_node);
  EXPECT_EQ(comm_.node_index(), comm_.rank() / per_node);
  EXPECT_EQ(comm_.local_rank(), comm_.rank() % per_node);
  // Every rank sees the same layout.
  const std::vector<int> indices = comm_.allgather_value(comm_.node_index());
  const std::vector<int> local_ranks = comm_.allgather_value(comm_.local_rank());
  for (int r = 0; r < comm_.size(); ++r) {
    EXPECT_EQ(indices[static_cast<std::size_t>(r)], r / per_node) << "rank " << r;
    EXPECT_EQ(local_ranks[static_cast<std::size_t>(r)], r % per_node) << "rank " << r;
  }
}

TEST_F(NodeLayoutTest, RanksShareANodeExactlyWhenTheyShareAHostName) {
  // Host names as bytes (u8 is the collectives' byte type), NUL-terminated.
  std::array<std::uint8_t, 64> name{};
  ASSERT_EQ(gethostname(reinterpret_cast<char*>(name.data()), name.size() - 1), 0);
  std::vector<std::uint8_t> names(name.size() * static_cast<std::size_t>(comm_.size()));
  comm_.allgather(std::span<const std::uint8_t>(name), std::span<std::uint8_t>(names));
  const auto host = [&](int r) {
    return std::string(
        reinterpret_cast<const char*>(names.data() + static_cast<std::size_t>(r) * name.size()));
  };
  const std::vector<int> indices = comm_.allgather_value(comm_.node_index());
  for (int a = 0; a < comm_.size(); ++a) {
    for (int b = 0; b < comm_.size(); ++b) {
      EXPECT_EQ(host(a) == host(b), indices[static_cast<std::size_t>(a)] ==
                                        indices[static_cast<std::size_t>(b)])
          << "ranks " << a << " (" << host(a) << ") and " << b << " (" << host(b) << ")";
    }
  }
}

}  // namespace
}  // namespace mpitrain
