// HierarchicalAlgorithm: shm reduce-scatter in the node, pipelined allreduce of the shard
// across nodes, shm allgather in the node.
//
// Cost for N nodes of L ranks (n = N L), B bytes as sent, S = ceil(count / L) elements per
// shard (B_s = S * element size, about B / L):
//   stage 1  shm_reduce_scatter on the node's segment: per rank copies (L-1) B_s in (none
//            when the buffer lies in the segment's arena and count divides by L), combines
//            B_s from L inputs into its shard (out of place: its own block of recv); 1
//            synchronisation per workspace piece. No network traffic.
//   stage 2  allreduce of the B_s shard over `cross` (N ranks, one per node). N = 2: each
//            rank sends its shard to its peer in chunks of kChunkBytes, kInFlight chunks
//            outstanding each way (so the link never idles while a chunk is combined), and
//            combines each received chunk into its own: B_s sent and B_s received per rank,
//            L B_s ~ B each way per node link, B_s combined; one message latency, then the
//            link's rate. N > 2: the ring (ring_allreduce.hpp) over `cross`, 2 (N-1) steps,
//            2 (N-1)/N B_s each way per rank. A flat ring over all n ranks (node by node)
//            moves 2 (n-1)/n B each way through each node's link: 1.5 B at 2 x 2, 1.5x this.
//   stage 3  shm_allgather: per rank copies B_s in and (L-1) B_s out (in place when the
//            shard is its block of recv: no copy of its own block); 1 synchronisation per
//            piece.
//   When count does not divide by L the buffer is padded to L S elements in a scratch copy
//   (one extra copy in and out; padding values are reduced and dropped). count 0 returns at
//   once; count < L leaves some shards of padding only.
//   avg: stages 1-2 sum; each rank divides its shard by n before stage 3.
//
// Synchronisations: stages 1 and 3 as shm's (1 per workspace piece; 2 in all when every
// buffer lies in the arena), stage 2 one message each way per chunk (N = 2) or the ring's
// 2 (N-1) steps; no barrier.
//
// Reduction order and rounding: element i of shard r is reduced on each node by shm in local
// rank order, s_k = ((x_{k,0} op x_{k,1}) op ...) op x_{k,L-1} for node k; then across nodes
// at N = 2 as s_peer op s_mine on both ranks of the pair (the same two values, and the
// reduce_kernels.hpp combines are commutative, signed zeros included; the one freedom is the
// payload of a NaN), at N > 2 in the ring's order (each chunk combined on one rank, then
// copied). Every rank gets the same bits: each element is reduced by exactly one group of
// ranks and then copied by shm_allgather. This is NOT shm's or the ring's rank-order sum
// ((x_0 + x_1) + x_2) + ... in general: floating-point results may differ from theirs in the
// last bits (node sums are added, not ranks one by one); at 2 x 2, ranks placed node by
// node, it is (x_0 + x_1) + (x_2 + x_3). 16-bit types (bf16, f16) widen to fp32, combine and
// round to 16 bits at every combine, as shm and the ring do; avg of a 16-bit type rounds the
// sum to 16 bits, then divides in fp32 and rounds once more (exact when n is a power of two,
// barring subnormals).
// fp32 data on a 16-bit wire: float() of the 16-bit allreduce of the rounded data (the
// conversion passes of run_wire_by_conversion), so the bytes crossing nodes are 16-bit.
//
// Deadline: shm's waits honour the segment's timeout (ShmTimeout), the message waits go
// through bounded_wait.hpp with ctx.timeout (WaitExpired).

#include "mpitrain/collectives/detail/hierarchical_algorithm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "mpitrain/collectives/detail/bounded_wait.hpp"
#include "mpitrain/collectives/detail/reduce_kernels.hpp"
#include "mpitrain/collectives/detail/ring_allreduce.hpp"
#include "mpitrain/collectives/detail/shm_collectives.hpp"
#include "mpitrain/collectives/detail/shm_segment.hpp"

namespace mpitrain::detail {
namespace {

// Inter-node chunk and pipeline depth at 2 nodes: 256 KiB is ~1 ms at 2 Gbit/s, long enough
// for the per-message overhead to vanish, short enough that the first combine starts early.
constexpr std::size_t kChunkBytes = std::size_t{256} << 10;
constexpr std::size_t kInFlight = 4;

std::byte* bytes(void* p) noexcept { return static_cast<std::byte*>(p); }

// Allreduces `count` elements of `shard` in place over ctx.cross with `op` (avg as sum).
// Two nodes: each rank sends its whole shard to its peer in chunks (kInFlight outstanding
// each way, so both directions of the link stay busy) and combines each received chunk into
// its own: peer op mine, the same two values on both sides. More nodes: the ring.
void cross_allreduce(const CommContext& ctx, void* shard, std::size_t count, DType type,
                     ReduceOp op) {
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;
  if (ctx.cross_size > 2) {
    ring_allreduce(ctx.cross, ctx.cross_rank, ctx.cross_size, shard, shard, count, type,
                   combine, kRingSegmentBytes, ctx.timeout);
    return;
  }
  const int peer = 1 - ctx.cross_rank;
  const std::size_t esize = dtype_bytes(type);
  const std::size_t chunk =
      std::max<std::size_t>(1, std::min(kChunkBytes / esize, ctx.max_call));
  const std::size_t chunks = (count + chunk - 1) / chunk;
  const std::size_t slots = std::min(kInFlight, chunks);
  auto incoming = std::make_unique_for_overwrite<std::byte[]>(slots * chunk * esize);
  // reqs[2 s]: the receive into slot s, reqs[2 s + 1]: the send of the same chunk.
  std::array<MPI_Request, 2 * kInFlight> reqs;
  reqs.fill(MPI_REQUEST_NULL);
  constexpr int kTag = 0;
  std::size_t posted = 0;
  for (std::size_t done = 0; done < chunks; ++done) {
    while (posted < chunks && posted - done < slots) {
      const std::size_t off = posted * chunk;
      const int len = static_cast<int>(std::min(chunk, count - off));
      const std::size_t s = posted % slots;
      ctx.check(MPI_Irecv(incoming.get() + s * chunk * esize, len, CommContext::mpi_type(type),
                          peer, kTag, ctx.cross, &reqs[2 * s]),
                "MPI_Irecv (hierarchical, across nodes)", static_cast<std::size_t>(len));
      ctx.check(MPI_Isend(bytes(shard) + off * esize, len, CommContext::mpi_type(type), peer,
                          kTag, ctx.cross, &reqs[2 * s + 1]),
                "MPI_Isend (hierarchical, across nodes)", static_cast<std::size_t>(len));
      ++posted;
    }
    const std::size_t off = done * chunk;
    const std::size_t len = std::min(chunk, count - off);
    const std::size_t s = done % slots;
    // The send must be done too: the combine overwrites the chunk it reads.
    ctx.check(wait_requests(&reqs[2 * s], 2, ctx.timeout),
              "MPI_Waitall (hierarchical, across nodes)", len);
    reduce_inplace(bytes(shard) + off * esize, incoming.get() + s * chunk * esize, len, type,
                   combine);
  }
}

}  // namespace

std::string HierarchicalAlgorithm::why_not(const CollectiveArgs&, const CommContext& ctx) const {
  if (ctx.node_count <= 1) {
    return "the ranks are on one node (hierarchical combines nodes; shm is the one-node path)";
  }
  if (ctx.local_size == 1) {
    return "each node holds one rank (nothing to combine in shared memory: the flat algorithms "
           "are the same exchange without the copies)";
  }
  if (!ctx.uniform_nodes || ctx.cross == MPI_COMM_NULL) {
    return fmt::format("the {} nodes hold different numbers of ranks", ctx.node_count);
  }
  if (ctx.shm == nullptr) return "this communicator has no shared-memory segment";
  return {};
}

std::string HierarchicalAlgorithm::why_not_nonblocking(const CollectiveArgs&) const {
  return "hierarchical has no nonblocking form (its shared-memory stages advance only while "
         "a rank is inside the call); run the blocking form on a CommStream to overlap it";
}

void HierarchicalAlgorithm::run(const CommContext& ctx, const CollectiveArgs& args) const {
  if (args.count == 0) return;
  if (args.has_wire()) return run_wire_by_conversion(ctx, args);
  ShmSegment& seg = *ctx.shm;
  const std::size_t local = static_cast<std::size_t>(ctx.local_size);
  const std::size_t esize = dtype_bytes(args.type);
  const std::size_t shard_count = (args.count + local - 1) / local;
  const std::size_t padded = shard_count * local;
  const ReduceOp combine = args.reduce == ReduceOp::avg ? ReduceOp::sum : args.reduce;

  // Padded copy when count does not divide by the local size: every shard then has
  // shard_count elements (shm_reduce_scatter and shm_allgather take equal blocks).
  std::unique_ptr<std::byte[]> padded_buf;
  const void* send = args.send;
  void* gathered = args.recv;
  if (padded != args.count) {
    padded_buf = std::make_unique<std::byte[]>(padded * esize);  // zeroed padding
    std::memcpy(padded_buf.get(), args.send, args.count * esize);
    send = padded_buf.get();
    gathered = padded_buf.get();
  }
  // Out of place and unpadded, this rank's shard is its own block of recv, where the
  // allgather in place expects it: no allocation (whose fresh pages fault in as the shard is
  // written: 32 MiB at 64 MiB x 2 ranks) and no copy of the rank's own block in stage 3.
  std::unique_ptr<std::byte[]> own_shard;
  std::byte* shard = nullptr;
  if (padded == args.count && args.send != args.recv) {
    shard = static_cast<std::byte*>(args.recv) +
            static_cast<std::size_t>(seg.rank()) * shard_count * esize;
  } else {
    own_shard = std::make_unique_for_overwrite<std::byte[]>(shard_count * esize);
    shard = own_shard.get();
  }

  shm_reduce_scatter(seg, send, shard, shard_count, args.type, combine);
  cross_allreduce(ctx, shard, shard_count, args.type, combine);
  if (args.reduce == ReduceOp::avg) divide_inplace(shard, shard_count, args.type, ctx.size);
  shm_allgather(seg, shard, gathered, shard_count, args.type);
  if (gathered != args.recv) std::memcpy(args.recv, gathered, args.count * esize);
}

}  // namespace mpitrain::detail
