// Ring allreduce: reduce-scatter around the ring, then allgather around the ring.
//
// Cost (n ranks, B bytes): 2(n-1) steps; each rank sends 2(n-1)/n * B bytes, receives as
// much, and combines (n-1)/n * B bytes of elements. Per step, the chunk a rank receives is
// split into segments of kRingSegmentBytes; a few segments are in flight while the rank
// combines the one that arrived, so the combine reads data that is still in cache.
#include "mpitrain/collectives/detail/ring_allreduce.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "mpitrain/collectives/detail/reduce_kernels.hpp"
#include "mpitrain/collectives/detail/ring_schedule.hpp"

namespace mpitrain::detail {
namespace {

// Segments of a chunk in flight at once during reduce-scatter.
constexpr std::size_t kSlots = kRingSlots;
// Largest single message of the allgather phase (bytes, below INT_MAX).
constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 30;

}  // namespace

void ring_allreduce(MPI_Comm comm, int rank, int size, const void* send, void* recv,
                    std::size_t count, DType type, ReduceOp op, std::size_t segment_bytes,
                    std::chrono::nanoseconds timeout) {
  if (count == 0) return;
  const std::size_t esize = dtype_bytes(type);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (size == 1) {  // the sum of one buffer, and its average over one rank, is the buffer
    if (in != out) std::memcpy(out, in, count * esize);
    return;
  }

  const Ring ring(comm, rank, size, count, timeout);
  const Chunks chunks{count, static_cast<std::size_t>(size)};
  const std::size_t seg = std::max<std::size_t>(1, segment_bytes / esize);  // elements
  const std::size_t seg_bytes = seg * esize;
  std::vector<MPI_Request> sends;

  // Scratch for the segments in flight: kSlots segments, or less for short chunks.
  const std::size_t longest = chunks.length(0);
  const std::size_t slot_elems = std::min(seg, longest);
  std::vector<std::byte> scratch(kSlots * slot_elems * esize);
  std::array<MPI_Request, kSlots> slot_req{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};

  // Reduce-scatter: at step s, send chunk rank-s (our input at s = 0, then the partial sum
  // combined in step s-1) and combine the incoming chunk rank-s-1 with our own input into
  // recv. After n-1 steps, chunk rank+1 holds the full reduction.
  for (int s = 0; s < size - 1; ++s) {
    const std::size_t send_c = ring.chunk_of(-s);
    const std::size_t recv_c = ring.chunk_of(-s - 1);
    const bool last = s == size - 2;
    const std::byte* src = (s == 0 ? in : out) + chunks.begin(send_c) * esize;
    ring.post_sends(src, chunks.length(send_c) * esize, seg_bytes, sends);

    const std::size_t rlen = chunks.length(recv_c);
    const std::byte* local = in + chunks.begin(recv_c) * esize;
    std::byte* dst = out + chunks.begin(recv_c) * esize;
    const std::size_t nseg = (rlen + seg - 1) / seg;
    auto seg_len = [&](std::size_t j) { return std::min(seg, rlen - j * seg); };
    auto slot = [&](std::size_t j) { return scratch.data() + (j % kSlots) * slot_elems * esize; };
    for (std::size_t j = 0; j < std::min(nseg, kSlots); ++j) {
      ring.post_recv(slot(j), seg_len(j) * esize, &slot_req[j % kSlots]);
    }
    for (std::size_t j = 0; j < nseg; ++j) {
      ring.wait(&slot_req[j % kSlots]);
      const std::size_t off = j * seg * esize;
      if (last && op == ReduceOp::avg) {
        sum_and_divide(dst + off, slot(j), local + off, seg_len(j), type, size);
      } else {
        reduce_into(dst + off, slot(j), local + off, seg_len(j), type, op);
      }
      if (j + kSlots < nseg) {
        ring.post_recv(slot(j), seg_len(j + kSlots) * esize, &slot_req[j % kSlots]);
      }
    }
    ring.wait_all(sends);
  }

  // Allgather: at step s, forward chunk rank+1-s (reduced here, or received at step s-1)
  // and receive chunk rank-s straight into place.
  std::vector<MPI_Request> recvs;
  for (int s = 0; s < size - 1; ++s) {
    const std::size_t send_c = ring.chunk_of(1 - s);
    const std::size_t recv_c = ring.chunk_of(-s);
    std::byte* rdst = out + chunks.begin(recv_c) * esize;
    const std::size_t rbytes = chunks.length(recv_c) * esize;
    for (std::size_t off = 0; off < rbytes; off += kMaxMessageBytes) {
      MPI_Request req = MPI_REQUEST_NULL;
      ring.post_recv(rdst + off, std::min(kMaxMessageBytes, rbytes - off), &req);
      recvs.push_back(req);
    }
    ring.post_sends(out + chunks.begin(send_c) * esize, chunks.length(send_c) * esize,
                    kMaxMessageBytes, sends);
    ring.wait_all(recvs);
    ring.wait_all(sends);
  }
}

}  // namespace mpitrain::detail
