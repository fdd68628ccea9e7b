// Fused ring allreduce: fp32 data, 16-bit messages (see wire_ring_allreduce.hpp).
//
// Cost (n ranks, count values, B = 2 * count bytes as sent): 2(n-1) steps; each rank sends
// and receives 2(n-1)/n * B bytes in messages of at most segment_bytes; each fp32 value is
// rounded once and written once, inside the loops below. The schedule is ring_allreduce's,
// with `wire_image` (16-bit) in the role of its output buffer and the fp32 data in the role
// of its input:
//   reduce-scatter step s: send chunk rank-s (s = 0: rounded from the data segment by
//     segment, just before each segment is sent; later: the partial sums of step s-1),
//     receive chunk rank-s-1 segment by segment straight into the image, and combine each
//     segment with the rounded data: image = image (op) round(data). The last step also
//     widens the result into the data.
//   allgather step s: send chunk rank+1-s from the image, receive chunk rank-s into the image
//     segment by segment and widen each segment into the data as it arrives.
#include "mpitrain/collectives/detail/wire_ring_allreduce.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "mpitrain/collectives/detail/reduce_kernels.hpp"

namespace mpitrain::detail {
namespace {

constexpr std::size_t kWireBytes = sizeof(std::uint16_t);

// A chunk's segments: [j * seg, min((j + 1) * seg, length)).
struct Segments {
  std::size_t length;  // elements in the chunk
  std::size_t seg;     // elements per segment
  std::size_t count() const noexcept { return (length + seg - 1) / seg; }
  std::size_t begin(std::size_t j) const noexcept { return j * seg; }
  std::size_t size(std::size_t j) const noexcept { return std::min(seg, length - j * seg); }
};

// Receives the segments of one chunk into `image` with at most kRingSlots messages posted at
// a time, calling on_arrival(j) for each segment j in order once it has arrived.
template <class OnArrival>
void receive_segments(const Ring& ring, std::uint16_t* image, const Segments& segs,
                      OnArrival&& on_arrival) {
  std::array<MPI_Request, kRingSlots> req{};
  req.fill(MPI_REQUEST_NULL);
  const std::size_t nseg = segs.count();
  auto post = [&](std::size_t j) {
    ring.post_recv(image + segs.begin(j), segs.size(j) * kWireBytes, &req[j % kRingSlots]);
  };
  for (std::size_t j = 0; j < std::min(nseg, kRingSlots); ++j) post(j);
  for (std::size_t j = 0; j < nseg; ++j) {
    ring.wait(&req[j % kRingSlots]);
    if (j + kRingSlots < nseg) post(j + kRingSlots);
    on_arrival(j);
  }
}

}  // namespace

void wire_ring_allreduce(MPI_Comm comm, int rank, int size, float* data,
                         std::uint16_t* wire_image, std::size_t count, DType wire, ReduceOp op,
                         std::size_t segment_bytes, std::chrono::nanoseconds timeout) {
  if (count == 0) return;
  if (size == 1) {  // the sum (and average) over one rank is the rounded buffer
    narrow_from_f32(data, wire_image, count, wire, 1);
    widen_to_f32(wire_image, data, count, wire);
    return;
  }

  const Ring ring(comm, rank, size, count, timeout);
  const Chunks chunks{count, static_cast<std::size_t>(size)};
  const std::size_t seg = std::max<std::size_t>(1, segment_bytes / kWireBytes);  // elements
  std::vector<MPI_Request> sends;

  for (int s = 0; s < size - 1; ++s) {
    const std::size_t send_c = ring.chunk_of(-s);
    const std::size_t recv_c = ring.chunk_of(-s - 1);
    const bool last = s == size - 2;
    const Segments out{chunks.length(send_c), seg};
    std::uint16_t* out_image = wire_image + chunks.begin(send_c);
    const float* out_data = data + chunks.begin(send_c);
    // Step 0 sends the rank's own values, rounded segment by segment just before each leaves
    // (interleaved with the receives below, so the first segment leaves at once); later steps
    // send the partial sums combined in the previous step.
    std::size_t sent = 0;
    auto send_next = [&] {
      if (s == 0) narrow_from_f32(out_data + out.begin(sent), out_image + out.begin(sent),
                                  out.size(sent), wire, 1);
      ring.post_send(out_image + out.begin(sent), out.size(sent) * kWireBytes, sends);
      ++sent;
    };
    if (s > 0) {
      while (sent < out.count()) send_next();
    }

    const Segments in{chunks.length(recv_c), seg};
    std::uint16_t* in_image = wire_image + chunks.begin(recv_c);
    float* in_data = data + chunks.begin(recv_c);
    if (s == 0 && out.count() > 0) send_next();
    receive_segments(ring, in_image, in, [&](std::size_t j) {
      // Every rank posts its segment j + 1 before it waits for its segment j + 1: no rank
      // waits for a segment its left neighbour has not sent.
      if (sent < out.count()) send_next();
      std::uint16_t* w = in_image + in.begin(j);
      float* d = in_data + in.begin(j);
      if (last) {
        combine_wire_last(w, d, d, in.size(j), wire, op, size);
      } else {
        combine_wire(w, d, in.size(j), wire, op);
      }
    });
    while (sent < out.count()) send_next();
    ring.wait_all(sends);
  }

  // Allgather: forward chunk rank+1-s (reduced here, or received at step s-1), receive chunk
  // rank-s into the image and widen it into the data.
  for (int s = 0; s < size - 1; ++s) {
    const std::size_t send_c = ring.chunk_of(1 - s);
    const std::size_t recv_c = ring.chunk_of(-s);
    ring.post_sends(reinterpret_cast<const std::byte*>(wire_image + chunks.begin(send_c)),
                    chunks.length(send_c) * kWireBytes, seg * kWireBytes, sends);
    const Segments in{chunks.length(recv_c), seg};
    std::uint16_t* in_image = wire_image + chunks.begin(recv_c);
    float* in_data = data + chunks.begin(recv_c);
    receive_segments(ring, in_image, in, [&](std::size_t j) {
      widen_to_f32(in_image + in.begin(j), in_data + in.begin(j), in.size(j), wire);
    });
    ring.wait_all(sends);
  }
}

}  // namespace mpitrain::detail
