#pragma once
// Shared by the shared-memory collectives tests: the node communicator (what the lead's
// Communicator hands ShmSegment) and a cross-rank identity check over it.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "collective_values.hpp"

namespace mpitrain::test {

// Owns a communicator of the ranks sharing memory with this one (MPI_Comm_split_type).
class NodeComm {
 public:
  NodeComm() {
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~NodeComm() { MPI_Comm_free(&comm_); }
  NodeComm(const NodeComm&) = delete;
  NodeComm& operator=(const NodeComm&) = delete;
  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

// Returns every rank's value, in rank order.
inline std::vector<std::uint64_t> gather_all(const NodeComm& node, std::uint64_t value) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(node.size()));
  MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, node.get());
  return all;
}

// Returns true when every rank of the node holds the same bytes.
inline bool identical_on_node(const NodeComm& node, const void* data, std::size_t bytes) {
  const std::uint64_t h = fnv1a(data, bytes);
  const std::vector<std::uint64_t> all = gather_all(node, h);
  return std::all_of(all.begin(), all.end(), [h](std::uint64_t x) { return x == h; });
}

}  // namespace mpitrain::test
