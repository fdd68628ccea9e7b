#pragma once
// Shared-memory collectives over a ShmSegment (internal to collectives/): every rank of the
// segment's node communicator calls the same function with the same counts, types, ops and
// root, in the same order. Blocking; counts are elements of `type` (size_t: more than 2^31
// is fine, the work goes in pieces of at most the segment's workspace).
//
// Synchronisation: no MPI call. Each rank publishes a sequence number in its control slot
// (release) after each stage and waits until every rank has published it (acquire); the two
// workspaces per rank alternate piece by piece so that a rank may run one piece ahead of its
// slowest peer (see ShmSegment::next_buffer). A wait honours the segment's timeout: past it,
// ShmTimeout names the collective, this rank, the sequence number and the ranks that did not
// arrive, and the segment is unusable afterwards.
//
// Reduction order (allreduce, reduce_scatter, wire allreduce): element i of the result is
// computed by exactly one rank, as ((x0 op x1) op x2) ... op x_{n-1} with x_r rank r's value,
// in rank order whatever the timing, then copied to the others: the result is bitwise
// identical on every rank and from run to run. Each combine is one call of the
// reduce_kernels.hpp kernels, so 16-bit formats (bf16, f16) widen both operands to fp32,
// combine and ROUND TO 16 BITS AT EVERY COMBINE, as the ring allreduce does (at 2 ranks, one
// rounding in all). avg divides by n inside the last combine (16-bit: in fp32 before its
// rounding; integers truncate); at 1 rank avg is a copy.

#include <cstddef>
#include <optional>

#include "mpitrain/collectives/detail/shm_segment.hpp"
#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain::detail {

// Reduces `count` elements of every rank's send into every rank's recv; send == recv is in
// place (otherwise they must not overlap). When send lies in the segment's arena (allocate())
// peers read it where it is instead of a copy (zero copy), per rank: ranks may mix; below
// 2 KiB in place (16 KiB otherwise) it is copied in all the same (cheaper than zero copy's
// extra synchronisation).
//
// Cost for n ranks, B bytes, W bytes of workspace: when every rank's send is in the arena and
// in place (the engine's buckets), 2 synchronisations whatever B; per rank combines its B/n
// slice from the n buffers into its own and writes it into the n - 1 peers' buffers. Else
// ceil(B / W) pieces; per rank copies B in (none with zero copy), then per piece one of
// (ShmOptions::symmetric_* choose, the same on every rank):
//   symmetric (1 synchronisation per piece): combines the whole piece from n inputs straight
//     into recv: reads n B ((n-1) B from peers), writes B. The default at 2 ranks and for
//     small pieces; never when an input is in the arena.
//   distributed (2 synchronisations per piece): combines its B/n slice from n inputs into its
//     workspace, then copies every slice out: reads 2 B ((n-1) B/n + (n-1) B/n from peers),
//     writes B + B/n.
//
// all_finite: when given on every rank, for an f32 allreduce of 2 KiB or more in place with
// every rank's buffer in the arena, set to whether every value of the result is finite (each
// rank checks the chunks it combined while they are in cache, and the ranks' notes travel
// with the last synchronisation: no pass of its own over the buffer). Left alone on every
// other path.
void shm_allreduce(ShmSegment& seg, const void* send, void* recv, std::size_t count,
                   DType type, ReduceOp op, std::optional<bool>* all_finite = nullptr);

// send holds size() * recv_count elements; rank r receives block r reduced over all ranks.
// send and recv must not overlap. When send lies in the segment's arena, peers read it where
// it is (zero copy), per rank: ranks may mix. The result does not depend on the path.
//
// Cost for n ranks, B_recv bytes received, W bytes of workspace: when every send is in the
// arena, 2 synchronisations whatever B_recv; per rank no copy in, combines B_recv from the
// n sends ((n-1) B_recv read from peers) straight into recv. Otherwise ceil(n B_recv / W)
// pieces, 1 synchronisation per piece (+ 1 at the end when some send is in the arena); per
// rank copies (n-1) B_recv in (the blocks its peers combine; none from the arena), combines
// B_recv from n inputs (its own block read from send) straight into recv.
void shm_reduce_scatter(ShmSegment& seg, const void* send, void* recv, std::size_t recv_count,
                        DType type, ReduceOp op);

// recv holds size() * send_count elements, block r from rank r. In place when send is block
// rank() of recv (otherwise they must not overlap). When send lies in the segment's arena
// (in place: recv there), peers read it where it is (zero copy), per rank: ranks may mix.
//
// Cost for n ranks, B_send bytes sent, W bytes of workspace: when every send is in the
// arena, 2 synchronisations whatever B_send; per rank (n-1) B_send copied straight from the
// peers' sends, no copy in. Otherwise ceil(B_send / W) pieces, 1 synchronisation per piece
// (+ 1 at the end when some send is in the arena); per rank copies B_send in (none from the
// arena) and (n-1) B_send out of peers' workspaces or arena sends.
void shm_allgather(ShmSegment& seg, const void* send, void* recv, std::size_t send_count,
                   DType type);

// Copies root's `count` elements of data into every rank's data.
//
// Cost: ceil(B / W) pieces, 1 synchronisation per piece. Root copies B in; every other rank
// copies B out of root's workspace.
void shm_broadcast(ShmSegment& seg, void* data, std::size_t count, DType type, int root);

// Allreduces fp32 `data` in place with bf16 or f16 (`wire`) as the exchanged format: the
// result is, bit for bit, float(shm_allreduce of round_to_wire(data))). The conversions are
// fused into the copies (copy-in rounds, copy-out widens), so it costs what the 16-bit
// shm_allreduce costs plus the wider reads and writes of data. Throws std::invalid_argument
// for another wire type.
void shm_wire_allreduce(ShmSegment& seg, float* data, std::size_t count, DType wire,
                        ReduceOp op);

}  // namespace mpitrain::detail
