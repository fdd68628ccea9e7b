// HierarchicalAlgorithm: shm reduce-scatter in the node, allreduce of the shard across
// nodes, shm allgather in the node; at 2 nodes, the three stages pipelined over pieces.
//
// 2 nodes of 1 rank (L = 1): no shared-memory stage; out of place recv is copied from send
// piece by piece, and the two ranks exchange the whole buffer in PeerExchange's chunks,
// combining each on arrival: B sent and B received per rank, one message latency, then the
// link's rate (a ring at 2 ranks moves the same bytes in two phases, the second waiting for
// the first).
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
//   N = 2: the buffer goes through the stages in pieces of kPieceBytes (each split into L
//   blocks, one shard per rank): stage 1 of piece k and stage 3 of piece k - 1 run while
//   the link carries pieces k - 1 and k, so the time is about the link's time for B plus one
//   piece's stages 1 and 3, where unpipelined it was the sum of the three stages (at 2 x 2,
//   2 Gbit/s, 64 MiB, interleaved runs: 300-318 ms against 323-329 ms unpipelined; 283-288
//   ms alone; the link's time for the call's bytes ~281 ms).
//   When count does not divide by L the buffer is padded to L S elements in a scratch copy
//   (one extra copy in and out; padding values are reduced and dropped). count 0 returns at
//   once; count < L leaves some shards of padding only.
//   avg: stages 1-2 sum; each rank divides its shard by n before stage 3.
//
// Synchronisations: stages 1 and 3 as shm's (1 per workspace piece; 2 per piece of the
// pipeline when every buffer lies in the arena), stage 2 one message each way per chunk
// (N = 2) or the ring's 2 (N-1) steps; no barrier.
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
#include <cstring>
#include <memory>
#include <vector>

#include "mpitrain/collectives/detail/bounded_wait.hpp"
#include "mpitrain/collectives/detail/reduce_kernels.hpp"
#include "mpitrain/collectives/detail/ring_allreduce.hpp"
#include "mpitrain/collectives/detail/shm_collectives.hpp"
#include "mpitrain/collectives/detail/shm_segment.hpp"

namespace mpitrain::detail {
namespace {

// Inter-node chunk and pipeline depth at 2 nodes. A chunk is one message of 63 KiB: below
// the 64 KiB eager limit of Open MPI's TCP transport (btl_tcp_eager_limit, header included),
// so a posted send goes into the kernel's socket buffer at once, with no handshake that would
// wait for the next MPI call, and the link keeps sending while the rank works in shared
// memory. kInFlight chunks (2 MiB, ~8 ms of a 2 Gbit/s link) stay outstanding each way per
// rank, so the link never waits for a combine either. Measured at 2 x 2 ranks, 2 Gbit/s, 64
// MiB, both pipelined: 283-292 ms, against 298-323 ms with 256 KiB chunks (handshaken), 8
// outstanding.
constexpr std::size_t kChunkBytes = 63 * std::size_t{1024};
constexpr std::size_t kInFlight = 32;
// Pieces of the buffer that go through the three stages one after another (a piece's
// shared-memory stages run while the previous piece crosses the link): 4 MiB is ~17 ms of
// a 2 Gbit/s link for the node, while its reduce-scatter and allgather take 1-2 ms. Pieces
// of 1 or 2 MiB measured slower (more synchronisations among ranks that share cores).
constexpr std::size_t kPieceBytes = std::size_t{4} << 20;

std::byte* bytes(void* p) noexcept { return static_cast<std::byte*>(p); }
const std::byte* bytes(const void* p) noexcept { return static_cast<const std::byte*>(p); }

// Returns the op each combine applies for `reduce`: avg sums, and is divided once at the end.
ReduceOp combining_op(ReduceOp reduce) noexcept {
  return reduce == ReduceOp::avg ? ReduceOp::sum : reduce;
}

// The exchange of shards between the two ranks of a cross pair (2 nodes): chunks of the
// shards added so far are sent to the peer and received from it, kInFlight outstanding each
// way, and each received chunk is combined into this rank's own, peer op mine (the same two
// values on both sides). Chunks complete in the order they were added.
class PeerExchange {
 public:
  // total_count: the elements of all the shards to come (sizes the receive slots).
  PeerExchange(const CommContext& ctx, DType type, ReduceOp combine, std::size_t total_count)
      : ctx_(ctx),
        type_(type),
        combine_(combine),
        esize_(dtype_bytes(type)),
        chunk_(std::max<std::size_t>(1, std::min(kChunkBytes / esize_, ctx.max_call))),
        slots_(std::max<std::size_t>(1, std::min(kInFlight, (total_count + chunk_ - 1) / chunk_))),
        incoming_(std::make_unique_for_overwrite<std::byte[]>(slots_ * chunk_ * esize_)),
        reqs_(2 * slots_, MPI_REQUEST_NULL) {}

  PeerExchange(const PeerExchange&) = delete;
  PeerExchange& operator=(const PeerExchange&) = delete;

  // A throw left receives posted into incoming_ and sends reading the shards (the
  // communicator is unusable then): those buffers, and the scratch buffers registered with
  // keep_if_pending, are left to them rather than freed under them.
  ~PeerExchange() {
    if (done_ == posted_) return;
    static_cast<void>(incoming_.release());
    for (std::unique_ptr<std::byte[]>* owner : scratch_) static_cast<void>(owner->release());
  }

  // Registers a scratch buffer that shards lie in (it must outlive this object): released,
  // not freed, if this object goes away with transfers pending.
  void keep_if_pending(std::unique_ptr<std::byte[]>& owner) { scratch_.push_back(&owner); }

  // Returns the number of chunks added so far, after queueing `count` elements of `shard`
  // (exchanged and combined in place; it must stay alive until they complete).
  std::size_t add(std::byte* shard, std::size_t count) {
    for (std::size_t off = 0; off < count; off += chunk_) {
      chunks_.push_back({shard + off * esize_, std::min(chunk_, count - off)});
    }
    post_more();
    return chunks_.size();
  }

  // Combines the chunks that have arrived, oldest first, and posts more; never blocks (its
  // MPI_Testall also moves Open MPI's transfers on between shared-memory stages).
  void progress() {
    while (done_ < posted_) {
      int finished = 0;
      ctx_.check(MPI_Testall(2, &reqs_[slot(done_)], &finished, MPI_STATUSES_IGNORE),
                 "MPI_Testall (hierarchical, across nodes)", chunks_[done_].count);
      if (!finished) return;
      complete_oldest();
    }
  }

  // Blocks until the first `end` chunks added are combined.
  void finish_through(std::size_t end) {
    while (done_ < end) {
      ctx_.check(wait_requests(&reqs_[slot(done_)], 2, ctx_.timeout),
                 "MPI_Waitall (hierarchical, across nodes)", chunks_[done_].count);
      complete_oldest();
    }
  }

 private:
  struct Chunk {
    std::byte* data;
    std::size_t count;
  };

  // Returns the index in reqs_ of chunk i's receive (its send follows).
  std::size_t slot(std::size_t i) const noexcept { return 2 * (i % slots_); }
  std::byte* incoming(std::size_t i) const noexcept {
    return incoming_.get() + (i % slots_) * chunk_ * esize_;
  }

  void post_more() {
    constexpr int kTag = 0;
    while (posted_ < chunks_.size() && posted_ - done_ < slots_) {
      const Chunk& c = chunks_[posted_];
      const int len = static_cast<int>(c.count);
      const std::size_t s = slot(posted_);
      ctx_.check(MPI_Irecv(incoming(posted_), len, CommContext::mpi_type(type_), peer(), kTag,
                           ctx_.cross, &reqs_[s]),
                 "MPI_Irecv (hierarchical, across nodes)", c.count);
      ++posted_;  // the receive is live from here: should the send fail, incoming_ stays
      ctx_.check(MPI_Isend(c.data, len, CommContext::mpi_type(type_), peer(), kTag, ctx_.cross,
                           &reqs_[s + 1]),
                 "MPI_Isend (hierarchical, across nodes)", c.count);
    }
  }

  // The oldest chunk's send and receive are done (the combine overwrites what it sent).
  void complete_oldest() {
    const Chunk& c = chunks_[done_];
    reduce_inplace(c.data, incoming(done_), c.count, type_, combine_);
    ++done_;
    post_more();
  }

  int peer() const noexcept { return 1 - ctx_.cross_rank; }

  const CommContext& ctx_;
  DType type_;
  ReduceOp combine_;
  std::size_t esize_;
  std::size_t chunk_;
  std::size_t slots_;
  std::unique_ptr<std::byte[]> incoming_;
  std::vector<MPI_Request> reqs_;
  std::vector<Chunk> chunks_;
  std::vector<std::unique_ptr<std::byte[]>*> scratch_;
  std::size_t posted_ = 0;
  std::size_t done_ = 0;
};

// Allreduces args at 2 nodes of one rank each: no shared-memory stage, the two ranks exchange
// the whole buffer in PeerExchange's chunks and each combines the peer's into its own (out
// of place, after copying send into recv piece by piece as the exchange goes on).
void run_pair(const CommContext& ctx, const CollectiveArgs& args) {
  const std::size_t esize = dtype_bytes(args.type);
  const std::size_t piece = kPieceBytes / esize;
  std::byte* data = bytes(args.recv);
  PeerExchange exchange(ctx, args.type, combining_op(args.reduce), args.count);
  std::size_t added = 0;
  for (std::size_t first = 0; first < args.count; first += piece) {
    const std::size_t count = std::min(piece, args.count - first);
    if (args.send != args.recv) {
      std::memcpy(data + first * esize, bytes(args.send) + first * esize, count * esize);
    }
    added = exchange.add(data + first * esize, count);
    exchange.progress();
  }
  exchange.finish_through(added);
  if (args.reduce == ReduceOp::avg) divide_inplace(data, args.count, args.type, ctx.size);
}

// One call's buffers and the pieces they go through the stages in: piece k is elements
// [first(k), first(k) + local * block_count(k)) of send and gathered, one block per local
// rank; this rank's shard of it (block_count(k) elements) is shard(k).
struct Pieces {
  ShmSegment& seg;
  const CommContext& ctx;
  const CollectiveArgs& args;
  ReduceOp combine;        // avg sums; allgather() divides
  const std::byte* send;   // args.send or its padded copy
  std::byte* gathered;     // args.recv or the padded copy
  std::byte* own_shards;   // null: the shards lie in gathered, each in its own block
  std::size_t local;       // ranks per node
  std::size_t esize;       // bytes per element
  std::size_t padded;      // elements of send and gathered, a multiple of local
  std::size_t piece;       // elements per piece (the last may be shorter), a multiple of local

  std::size_t count() const noexcept { return (padded + piece - 1) / piece; }
  std::size_t first(std::size_t k) const noexcept { return k * piece; }
  std::size_t block_count(std::size_t k) const noexcept {
    return std::min(piece, padded - first(k)) / local;
  }
  std::byte* shard(std::size_t k) const noexcept {
    if (own_shards != nullptr) return own_shards + first(k) / local * esize;
    return gathered + (first(k) + static_cast<std::size_t>(seg.rank()) * block_count(k)) * esize;
  }
  // Stage 1 of piece k: its blocks reduced over the node, this rank's into shard(k).
  void reduce_scatter(std::size_t k) const {
    shm_reduce_scatter(seg, send + first(k) * esize, shard(k), block_count(k), args.type,
                       combine);
  }
  // Stage 3 of piece k (after stage 2 completed shard(k)): the node's shards into gathered.
  void allgather(std::size_t k) const {
    if (args.reduce == ReduceOp::avg) {
      divide_inplace(shard(k), block_count(k), args.type, ctx.size);
    }
    shm_allgather(seg, shard(k), gathered + first(k) * esize, block_count(k), args.type);
  }
};

// Runs every piece through the three stages at 2 nodes, pipelined: piece k's reduce-scatter
// and piece k - 1's allgather run while the link carries the chunks of pieces k - 1 and k.
// The shared-memory stages go in the same order on every rank of the node: RS 0, RS 1, AG 0,
// RS 2, AG 1, ..., AG last. own_shards and padded_buf: the scratch buffers the shards may lie
// in, kept if a throw leaves transfers pending.
void run_pipelined(const Pieces& p, std::unique_ptr<std::byte[]>& own_shards,
                   std::unique_ptr<std::byte[]>& padded_buf) {
  const std::size_t n = p.count();
  PeerExchange exchange(p.ctx, p.args.type, p.combine, p.padded / p.local);
  exchange.keep_if_pending(own_shards);
  exchange.keep_if_pending(padded_buf);
  std::vector<std::size_t> added(n);
  for (std::size_t k = 0; k <= n; ++k) {
    if (k < n) {
      p.reduce_scatter(k);
      added[k] = exchange.add(p.shard(k), p.block_count(k));
      exchange.progress();
    }
    if (k > 0) {
      exchange.finish_through(added[k - 1]);
      p.allgather(k - 1);
      exchange.progress();
    }
  }
}

}  // namespace

std::string HierarchicalAlgorithm::why_not(const CollectiveArgs&, const CommContext& ctx) const {
  if (ctx.node_count <= 1) {
    return "the ranks are on one node (hierarchical combines nodes; shm is the one-node path)";
  }
  if (ctx.local_size == 1 && ctx.node_count > 2) {
    return "each node holds one rank and there are more than 2 nodes (nothing to combine in "
           "shared memory: the ring is the same exchange without the copies)";
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
  if (ctx.local_size == 1) return run_pair(ctx, args);
  const std::size_t local = static_cast<std::size_t>(ctx.local_size);
  const std::size_t esize = dtype_bytes(args.type);
  const std::size_t shard_count = (args.count + local - 1) / local;
  const std::size_t padded = shard_count * local;

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
  // Out of place and unpadded, this rank's shard of a piece is its own block of the piece in
  // recv, where the allgather in place expects it: no allocation (whose fresh pages fault in
  // as the shards are written: 32 MiB at 64 MiB x 2 ranks) and no copy of the rank's own
  // block in stage 3. Otherwise the shards of all the pieces, one after another, in
  // own_shards (shard_count elements).
  std::unique_ptr<std::byte[]> own_shards;
  if (padded != args.count || args.send == args.recv) {
    own_shards = std::make_unique_for_overwrite<std::byte[]>(shard_count * esize);
  }
  // Pieces of kPieceBytes (a multiple of the local size) at 2 nodes; one piece beyond, where
  // the ring's own segments pipeline the exchange.
  const Pieces pieces{*ctx.shm, ctx, args, combining_op(args.reduce), bytes(send),
                      bytes(gathered), own_shards.get(), local, esize, padded,
                      ctx.cross_size > 2 ? padded
                                         : std::max(local, kPieceBytes / esize / local * local)};
  if (ctx.cross_size > 2) {
    pieces.reduce_scatter(0);
    ring_allreduce(ctx.cross, ctx.cross_rank, ctx.cross_size, pieces.shard(0), pieces.shard(0),
                   shard_count, args.type, pieces.combine, kRingSegmentBytes, ctx.timeout);
    pieces.allgather(0);
  } else {
    run_pipelined(pieces, own_shards, padded_buf);
  }
  if (gathered != args.recv) std::memcpy(args.recv, gathered, args.count * esize);
}

}  // namespace mpitrain::detail
