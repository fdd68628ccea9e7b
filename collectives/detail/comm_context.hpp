#pragma once
// CommContext: what an algorithm needs to know of the communicator it runs on (internal to
// collectives/). The Communicator owns one; algorithms receive it by const reference.
//
// It owns the MPI objects: the duplicated communicator, the node-local communicator (ranks
// sharing memory), the cross-node communicator (ranks sharing a local rank), the MPI user ops
// that combine bf16/f16 in fp32, and the node's shared-memory segment. The destructor frees
// them in reverse order of creation unless MPI is finalised or a wait timed out.

#include <mpi.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "mpitrain/collectives/dtype.hpp"
#include "mpitrain/collectives/detail/collective_watch.hpp"

namespace mpitrain::detail {

class ShmSegment;

struct CommContext {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm node = MPI_COMM_NULL;  // ranks sharing memory with this one
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_count = 1;
  int node_index = 0;
  // For each rank of `comm`: its rank in `node` when it shares this node, else -1.
  std::vector<int> node_rank_of;
  // True when every node holds local_size ranks (the hierarchical algorithm needs it).
  bool uniform_nodes = true;
  // The ranks of `comm` with this rank's local rank, one per node (split by local rank,
  // keyed by rank): the hierarchical algorithm's inter-node stage. Created only when
  // node_count > 1 and uniform_nodes; MPI_COMM_NULL otherwise.
  MPI_Comm cross = MPI_COMM_NULL;
  int cross_rank = 0;
  int cross_size = 1;
  // A duplicate of `comm` for the watch's checks, so that a check never matches a collective
  // of the program (collective_watch.hpp).
  MPI_Comm check_comm = MPI_COMM_NULL;
  // How long one wait for peers may last (zero: for ever); bounded_wait.hpp.
  std::chrono::nanoseconds timeout{0};
  CollectiveWatch watch;
  // Set when a wait timed out: peers no longer agree on what runs, and the collective frees
  // of the destructor would wait for a rank that is not coming (they are skipped).
  bool broken = false;
  // The largest element count handed to one MPI call; longer buffers go in pieces.
  std::size_t max_call = 0;
  // MPI user ops for bf16 and f16: [bf16, f16][sum, max, min].
  std::array<std::array<MPI_Op, 3>, 2> half_ops{{{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                                                 {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}}};
  // The node's shared memory (shm algorithms, zero-copy buffers); freed first.
  std::unique_ptr<ShmSegment> shm;

  CommContext() = default;
  CommContext(const CommContext&) = delete;
  CommContext& operator=(const CommContext&) = delete;
  ~CommContext();

  // Creates the bf16/f16 user ops (collective only in the sense that every rank needs them).
  void create_half_ops();
  // Returns the MPI datatype that carries `type` (bf16/f16: MPI_UINT16_T, combined by our ops).
  static MPI_Datatype mpi_type(DType type) noexcept;
  // Returns the MPI op combining `type` with `op` (avg combines as sum).
  MPI_Op mpi_op(DType type, ReduceOp op) const noexcept;
  // Throws MpiError naming the call, this rank and `count` unless rc is MPI_SUCCESS.
  void check(int rc, std::string_view call, std::size_t count) const;
  // Throws MpiError (MPI_ERR_ROOT) naming the call when root is not a rank.
  void check_root(std::string_view call, int root, std::size_t count) const;
};

// Returns true for the 16-bit floating formats, which MPI cannot combine natively.
inline bool is_half(DType type) noexcept { return type == DType::bf16 || type == DType::f16; }

}  // namespace mpitrain::detail
