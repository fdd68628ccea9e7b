// Shared-memory collectives (see shm_collectives.hpp). Each function walks its buffer in
// pieces that fit one workspace; per piece: copy in, publish, wait for every rank, then read
// the peers' workspaces (or arena buffers) directly.
#include "mpitrain/collectives/detail/shm_collectives.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "mpitrain/collectives/detail/reduce_kernels.hpp"
#include "mpitrain/precision/all_finite.hpp"

namespace mpitrain::detail {
namespace {

// Slices of a piece start on 64-byte boundaries of the piece (whole cache lines per rank).
constexpr std::size_t kSliceAlignBytes = 64;
// An allreduce in place of fewer bytes than this copies its input in even from the arena:
// the copy is cheaper than the zero-copy path's extra synchronisation (2 ranks, 2026-11-28,
// buffers in the arena in place, interleaved runs: zero copy 0.81-0.89 us at 256-512 bytes
// against 0.47-0.67 for the copy path, equal at 1 KiB, 0.82-0.84 us against 1.16 at 2 KiB,
// 0.87-0.91 against 1.68 at 4 KiB).
constexpr std::size_t kAllreduceZeroCopyInPlaceMinBytes = std::size_t{2} << 10;
// The same for an input in the arena that is not reduced in place (it goes piece by piece,
// slice by slice: two synchronisations per piece where the copy path takes one). Measured
// 2026-11-27 on the earlier zero-copy path (three synchronisations in all); kept.
constexpr std::size_t kAllreduceZeroCopyMinBytes = std::size_t{16} << 10;

// The part [begin, end) of a piece of `count` elements that `rank` of `n` reduces: equal
// cache-line-aligned slices in rank order, the last ones short or empty.
struct Slice {
  std::size_t begin;
  std::size_t end;
  std::size_t count() const noexcept { return end - begin; }
};

Slice slice_of(std::size_t count, int n, int rank, std::size_t elem_bytes) {
  const std::size_t unit = std::max<std::size_t>(kSliceAlignBytes / elem_bytes, 1);
  const std::size_t per_rank = ((count + n - 1) / n + unit - 1) / unit * unit;
  const std::size_t begin = std::min(per_rank * static_cast<std::size_t>(rank), count);
  return {begin, std::min(begin + per_rank, count)};
}

// out = ((in[0] op in[1]) op in[2]) ... op in[n-1]; avg divides by n in the last combine.
// out overlaps none of the inputs.
void combine_in_rank_order(std::byte* out, const std::vector<const std::byte*>& in,
                           std::size_t count, DType type, ReduceOp op) {
  const int n = static_cast<int>(in.size());
  if (n == 1) {
    std::memcpy(out, in[0], count * dtype_bytes(type));
    return;
  }
  for (int k = 1; k < n; ++k) {
    const void* acc = k == 1 ? in[0] : out;
    if (op == ReduceOp::avg && k == n - 1) {
      sum_and_divide(out, in[static_cast<std::size_t>(k)], acc, count, type, n);
    } else {
      reduce_into(out, in[static_cast<std::size_t>(k)], acc, count, type, op);
    }
  }
}

// Set in a published input offset when the rank's allreduce is in place (send == recv), so
// that its buffer may receive the result where peers read its input. Arena offsets stay far
// below 2^62.
constexpr std::uint64_t kInPlaceFlag = std::uint64_t{1} << 62;

// A rank's result note (ShmSegment::set_result_flags) on the in-place allreduce: whether it
// checked the values it combined, and whether one was inf or NaN. Every rank stores one, so
// a peer never reads a note left by an earlier call.
constexpr std::uint64_t kChecked = 1;
constexpr std::uint64_t kNotFinite = 2;

// Returns the offset this rank publishes for an allreduce input: kNoOffset outside the arena,
// else the arena offset, flagged when the allreduce is in place.
std::uint64_t published_offset(std::optional<std::uint64_t> offset, bool in_place) {
  if (!offset) return ShmSegment::kNoOffset;
  return *offset | (in_place ? kInPlaceFlag : 0);
}

// The arena offsets of every rank's input for the current collective (ShmSegment::kNoOffset
// for a rank whose input is not in the arena), without the in-place flag; read after the
// first stage of the call. `all_in_place`: every rank's input is in the arena, in place.
std::vector<std::uint64_t> input_offsets(const ShmSegment& seg, bool* all_in_place = nullptr) {
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(seg.size()));
  bool in_place = true;
  for (int q = 0; q < seg.size(); ++q) {
    const std::uint64_t o = seg.input_offset(q);
    in_place = in_place && o != ShmSegment::kNoOffset && (o & kInPlaceFlag) != 0;
    offsets[static_cast<std::size_t>(q)] = o == ShmSegment::kNoOffset ? o : o & ~kInPlaceFlag;
  }
  if (all_in_place != nullptr) *all_in_place = in_place;
  return offsets;
}

// out = ((in[0] op in[1]) op in[2]) ... op in[n-1] where out is in[own] itself (the same
// bytes, writable through `out`): the steps before in[own] is consumed accumulate in
// `scratch` (disjoint from every input), the step that consumes it writes over it, and the
// later ones accumulate there. No final copy: the kernels allow an output that is exactly one
// operand. avg divides by n in the last step.
void combine_into_own(std::byte* out, std::byte* scratch, const std::vector<const std::byte*>& in,
                      int own, std::size_t count, DType type, ReduceOp op) {
  const int n = static_cast<int>(in.size());
  const void* acc = in[0];
  for (int k = 1; k < n; ++k) {
    void* step_out = k < own ? static_cast<void*>(scratch) : static_cast<void*>(out);
    if (op == ReduceOp::avg && k == n - 1) {
      sum_and_divide(step_out, in[static_cast<std::size_t>(k)], acc, count, type, n);
    } else {
      reduce_into(step_out, in[static_cast<std::size_t>(k)], acc, count, type, op);
    }
    acc = step_out;
  }
}

// The whole buffer at once, when every rank's input lies in the arena and the allreduce is
// in place (the engine's gradient buckets): after the first stage (every input is ready),
// each rank combines its slice of the whole buffer, reading every rank's buffer in rank
// order, writes it over its own input's slice, and copies it, chunk by chunk while it is
// still in cache, into the same slice of every peer's buffer; publish. Writing a peer's slice
// is safe: only this rank reads that slice of any buffer (for its combine), and the peer
// does not touch its buffer until the last stage. After it, every rank's buffer holds the
// whole result, and no peer reads or writes it any more (the next backward may start).
//
// Cost for n ranks and B bytes: 2 synchronisations in all (the first shared with the piece
// loop), whatever B; per rank no copy in, B/n combined from n buffers ((n-1) B/n read from
// peers) straight into its own buffer, then written to the n - 1 peers ((n-1) B/n, read from
// cache). Against pulling the peers' slices after a third synchronisation: one
// synchronisation and (n-1) B/n bytes read from memory less.
void allreduce_whole_in_place(ShmSegment& seg, const std::vector<std::uint64_t>& offsets,
                              std::size_t count, DType type, ReduceOp op, int b,
                              const char* name, std::optional<bool>* all_finite) {
  const int n = seg.size();
  const std::size_t eb = dtype_bytes(type);
  const Slice mine = slice_of(count, n, seg.rank(), eb);
  // Partial results of the ranks before this one, in chunks through this rank's output
  // workspace of piece buffer `b` (unused on this path otherwise; ranks 0 and 1 never need it).
  std::byte* scratch = seg.workspace_out(seg.rank(), b);
  const std::size_t chunk = std::max<std::size_t>(seg.workspace_bytes() / eb, 1);
  std::vector<const std::byte*> inputs(static_cast<std::size_t>(n));
  std::byte* own = seg.peer_address(seg.rank(), offsets[static_cast<std::size_t>(seg.rank())]);
  const bool check = all_finite != nullptr && type == DType::f32;
  bool finite = true;
  for (std::size_t at = mine.begin; at < mine.end; at += chunk) {
    const std::size_t m = std::min(chunk, mine.end - at);
    for (int q = 0; q < n; ++q) {
      inputs[static_cast<std::size_t>(q)] =
          seg.peer_address(q, offsets[static_cast<std::size_t>(q)]) + at * eb;
    }
    combine_into_own(own + at * eb, scratch, inputs, seg.rank(), m, type, op);
    if (check) {
      finite = finite && mpitrain::all_finite({reinterpret_cast<const float*>(own + at * eb), m});
    }
    for (int q = 0; q < n; ++q) {
      if (q == seg.rank()) continue;
      std::memcpy(seg.peer_address(q, offsets[static_cast<std::size_t>(q)]) + at * eb,
                  own + at * eb, m * eb);
    }
  }
  seg.set_result_flags(check ? (finite ? kChecked : kChecked | kNotFinite) : 0);
  seg.wait_all(seg.publish(), name);
  if (!check) return;
  for (int q = 0; q < n; ++q) {
    const std::uint64_t note = seg.result_flags(q);
    if ((note & kChecked) == 0) return;  // a peer did not look: no answer
    finite = finite && (note & kNotFinite) == 0;
  }
  *all_finite = finite;
}

// Moves a piece of the caller's data into the workspace and back: plain copies, or for the
// wire allreduce a rounding to 16 bits on the way in and a widening on the way out.
struct PieceIo {
  const std::byte* send;      // the caller's input
  std::byte* recv;            // the caller's output
  std::size_t user_bytes;     // bytes per element in send/recv
  DType type;                 // element type in the workspaces
  bool zero_copy;             // send lies in the arena: no copy in

  void copy_in(std::byte* ws, std::size_t first, std::size_t count) const {
    if (zero_copy) return;
    const std::byte* src = send + first * user_bytes;
    if (user_bytes == dtype_bytes(type)) {
      std::memcpy(ws, src, count * user_bytes);
    } else {
      narrow_from_f32(reinterpret_cast<const float*>(src), ws, count, type, 1);
    }
  }
  void copy_out(const std::byte* ws, std::size_t first, std::size_t count) const {
    std::byte* dst = recv + first * user_bytes;
    if (user_bytes == dtype_bytes(type)) {
      std::memcpy(dst, ws, count * user_bytes);
    } else {
      widen_to_f32(ws, reinterpret_cast<float*>(dst), count, type);
    }
  }
};

// Returns where rank q's input for a piece starting at element `first` lies: its workspace,
// or its arena buffer when `offset` names one.
const std::byte* piece_input(const ShmSegment& seg, int q, int b, std::uint64_t offset,
                             std::size_t first, std::size_t elem_bytes) {
  return offset == ShmSegment::kNoOffset ? seg.workspace_in(q, b)
                                         : seg.peer_address(q, offset) + first * elem_bytes;
}

// One piece, symmetric: every rank combines the whole piece from every rank's workspace, in
// rank order, so the result is the same everywhere with one synchronisation. Only when no
// rank's input is in the arena (the result is written while peers may still read inputs).
void allreduce_piece_symmetric(ShmSegment& seg, const PieceIo& io, std::size_t first,
                               std::size_t m, int b, ReduceOp op,
                               std::vector<const std::byte*>& inputs) {
  for (int q = 0; q < seg.size(); ++q) inputs[static_cast<std::size_t>(q)] = seg.workspace_in(q, b);
  if (io.user_bytes == dtype_bytes(io.type)) {
    combine_in_rank_order(io.recv + first * io.user_bytes, inputs, m, io.type, op);
  } else {
    std::byte* out = seg.workspace_out(seg.rank(), b);
    combine_in_rank_order(out, inputs, m, io.type, op);
    io.copy_out(out, first, m);
  }
}

// One piece, distributed: each rank combines its slice into its output workspace, publishes,
// waits, and copies every rank's slice out.
void allreduce_piece_distributed(ShmSegment& seg, const PieceIo& io, std::size_t first,
                                 std::size_t m, int b, ReduceOp op,
                                 const std::vector<std::uint64_t>& offsets,
                                 std::vector<const std::byte*>& inputs, const char* name) {
  const int n = seg.size();
  const std::size_t eb = dtype_bytes(io.type);
  const Slice mine = slice_of(m, n, seg.rank(), eb);
  if (mine.count() > 0) {
    for (int q = 0; q < n; ++q) {
      inputs[static_cast<std::size_t>(q)] =
          piece_input(seg, q, b, offsets[static_cast<std::size_t>(q)], first, eb) +
          mine.begin * eb;
    }
    combine_in_rank_order(seg.workspace_out(seg.rank(), b) + mine.begin * eb, inputs,
                          mine.count(), io.type, op);
  }
  seg.wait_all(seg.publish(), name);
  for (int q = 0; q < n; ++q) {
    const Slice s = slice_of(m, n, q, eb);
    if (s.count() > 0) {
      io.copy_out(seg.workspace_out(q, b) + s.begin * eb, first + s.begin, s.count());
    }
  }
}

// The allreduce over pieces; see shm_allreduce for the cost. `io.zero_copy` must match the
// input offset this rank set. Every rank takes the same path per piece: the choice depends
// on the piece size and on the offsets, which every rank reads after the first stage.
void allreduce_pieces(ShmSegment& seg, const PieceIo& io, std::size_t count, ReduceOp op,
                      const char* name, std::optional<bool>* all_finite = nullptr) {
  const std::size_t eb = dtype_bytes(io.type);
  const std::size_t piece_max = seg.workspace_bytes() / eb;
  std::vector<std::uint64_t> offsets;
  bool any_zero_copy = false;
  std::vector<const std::byte*> inputs(static_cast<std::size_t>(seg.size()));
  for (std::size_t first = 0; first < count; first += piece_max) {
    const std::size_t m = std::min(piece_max, count - first);
    const int b = seg.next_buffer();
    io.copy_in(seg.workspace_in(seg.rank(), b), first, m);
    seg.wait_all(seg.publish(), name);
    if (offsets.empty()) {
      bool all_in_place = false;
      offsets = input_offsets(seg, &all_in_place);
      if (all_in_place) {
        return allreduce_whole_in_place(seg, offsets, count, io.type, op, b, name, all_finite);
      }
      any_zero_copy = std::any_of(offsets.begin(), offsets.end(),
                                  [](std::uint64_t o) { return o != ShmSegment::kNoOffset; });
    }
    if (!any_zero_copy && seg.symmetric(m * eb)) {
      allreduce_piece_symmetric(seg, io, first, m, b, op, inputs);
    } else {
      allreduce_piece_distributed(seg, io, first, m, b, op, offsets, inputs, name);
    }
  }
}

// Copies send to recv unless they are the same buffer (a collective at one rank).
void copy_if_distinct(const void* send, void* recv, std::size_t bytes) {
  if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
}

// Returns true when every rank's input lies in the arena (offsets from input_offsets).
bool all_in_arena(const std::vector<std::uint64_t>& offsets) {
  return std::none_of(offsets.begin(), offsets.end(),
                      [](std::uint64_t o) { return o == ShmSegment::kNoOffset; });
}

// Returns true when some rank's input lies in the arena (peers read it where it is).
bool any_in_arena(const std::vector<std::uint64_t>& offsets) {
  return std::any_of(offsets.begin(), offsets.end(),
                     [](std::uint64_t o) { return o != ShmSegment::kNoOffset; });
}

// The reduce-scatter, every rank's send in the arena (the engine's ZeRO-1 buckets): after the
// first stage (every send ready), this rank combines its block from the n sends where they lie
// straight into recv, in rank order, in chunks of one workspace (the partial result stays in
// cache across the n - 1 combines); publish again, so that no rank changes its send while a
// peer still reads it.
//
// Cost for n ranks and B_recv bytes: 2 synchronisations in all (the first shared with the
// piece loop), whatever B_recv; per rank no copy in, B_recv combined from n sends
// ((n-1) B_recv read from peers) into recv.
void reduce_scatter_whole_zero_copy(ShmSegment& seg, const std::vector<std::uint64_t>& offsets,
                                    std::byte* recv, std::size_t recv_count, DType type,
                                    ReduceOp op, const char* name) {
  const int n = seg.size();
  const std::size_t eb = dtype_bytes(type);
  const std::size_t mine = static_cast<std::size_t>(seg.rank()) * recv_count;
  const std::size_t chunk = std::max<std::size_t>(seg.workspace_bytes() / eb, 1);
  std::vector<const std::byte*> inputs(static_cast<std::size_t>(n));
  for (std::size_t at = 0; at < recv_count; at += chunk) {
    const std::size_t m = std::min(chunk, recv_count - at);
    for (int q = 0; q < n; ++q) {
      inputs[static_cast<std::size_t>(q)] =
          seg.peer_address(q, offsets[static_cast<std::size_t>(q)]) + (mine + at) * eb;
    }
    combine_in_rank_order(recv + at * eb, inputs, m, type, op);
  }
  seg.wait_all(seg.publish(), name);
}

// The allgather, every rank's send in the arena (in place: the engine's ZeRO-1 parameter
// blocks): after the first stage (every send ready), this rank copies each peer's send where
// it lies into its block of recv; publish again, so that no rank changes its send (in place:
// its block of recv) while a peer still reads it. The caller copies its own block.
//
// Cost for n ranks and B_send bytes: 2 synchronisations in all (the first shared with the
// piece loop), whatever B_send; per rank no copy in, (n-1) B_send copied from peers.
void allgather_whole_zero_copy(ShmSegment& seg, const std::vector<std::uint64_t>& offsets,
                               std::byte* recv, std::size_t block_bytes, const char* name) {
  for (int q = 0; q < seg.size(); ++q) {
    if (q == seg.rank()) continue;
    std::memcpy(recv + static_cast<std::size_t>(q) * block_bytes,
                seg.peer_address(q, offsets[static_cast<std::size_t>(q)]), block_bytes);
  }
  seg.wait_all(seg.publish(), name);
}

}  // namespace

void shm_allreduce(ShmSegment& seg, const void* send, void* recv, std::size_t count,
                   DType type, ReduceOp op, std::optional<bool>* all_finite) {
  static constexpr const char* kName = "shm_allreduce";
  seg.require_usable(kName);
  const std::size_t eb = dtype_bytes(type);
  if (count == 0) return;
  if (seg.size() == 1) return copy_if_distinct(send, recv, count * eb);
  // Every rank decides alike: the count is the same everywhere.
  const std::size_t zero_copy_min =
      send == recv ? kAllreduceZeroCopyInPlaceMinBytes : kAllreduceZeroCopyMinBytes;
  const std::optional<std::uint64_t> offset =
      count * eb < zero_copy_min ? std::nullopt : seg.arena_offset(send, count * eb);
  seg.begin_input(published_offset(offset, send == recv));
  const PieceIo io{static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), eb, type,
                   offset.has_value()};
  allreduce_pieces(seg, io, count, op, kName, all_finite);
}

void shm_wire_allreduce(ShmSegment& seg, float* data, std::size_t count, DType wire,
                        ReduceOp op) {
  static constexpr const char* kName = "shm_wire_allreduce";
  if (wire != DType::bf16 && wire != DType::f16) {
    throw std::invalid_argument("shm_wire_allreduce: the wire type must be bf16 or f16");
  }
  seg.require_usable(kName);
  if (count == 0) return;
  if (seg.size() == 1) {
    // float(round(x)): what the 16-bit round trip gives at one rank.
    std::vector<std::uint16_t> wire_values(std::min<std::size_t>(count, 1 << 16));
    for (std::size_t first = 0; first < count; first += wire_values.size()) {
      const std::size_t m = std::min(wire_values.size(), count - first);
      narrow_from_f32(data + first, wire_values.data(), m, wire, 1);
      widen_to_f32(wire_values.data(), data + first, m, wire);
    }
    return;
  }
  seg.begin_input(ShmSegment::kNoOffset);
  const PieceIo io{reinterpret_cast<const std::byte*>(data), reinterpret_cast<std::byte*>(data),
                   sizeof(float), wire, false};
  allreduce_pieces(seg, io, count, op, kName);
}

void shm_reduce_scatter(ShmSegment& seg, const void* send, void* recv, std::size_t recv_count,
                        DType type, ReduceOp op) {
  static constexpr const char* kName = "shm_reduce_scatter";
  seg.require_usable(kName);
  const std::size_t eb = dtype_bytes(type);
  if (recv_count == 0) return;
  const int n = seg.size();
  const int me = seg.rank();
  if (n == 1) return copy_if_distinct(send, recv, recv_count * eb);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const auto un = static_cast<std::size_t>(n);
  const std::optional<std::uint64_t> offset = seg.arena_offset(send, un * recv_count * eb);
  seg.begin_input(offset.value_or(ShmSegment::kNoOffset));
  const std::size_t piece_max = std::max<std::size_t>(seg.workspace_bytes() / (un * eb), 1);
  std::vector<std::uint64_t> offsets;
  std::vector<const std::byte*> inputs(un);
  for (std::size_t first = 0; first < recv_count; first += piece_max) {
    const std::size_t m = std::min(piece_max, recv_count - first);
    const int b = seg.next_buffer();
    std::byte* ws = seg.workspace_in(me, b);
    // Peers read block q of this workspace for q != me only: this rank's own block is read
    // from send below, not copied.
    for (std::size_t q = 0; q < un && !offset; ++q) {
      if (q != static_cast<std::size_t>(me)) {
        std::memcpy(ws + q * m * eb, in + (q * recv_count + first) * eb, m * eb);
      }
    }
    seg.wait_all(seg.publish(), kName);
    if (offsets.empty()) {
      offsets = input_offsets(seg);
      if (all_in_arena(offsets)) {
        return reduce_scatter_whole_zero_copy(seg, offsets, out, recv_count, type, op, kName);
      }
    }
    // Where this rank's block of the piece lies in a send, and in a workspace.
    const std::size_t at = (static_cast<std::size_t>(me) * recv_count + first) * eb;
    const std::size_t in_workspace = static_cast<std::size_t>(me) * m * eb;
    for (int q = 0; q < n; ++q) {
      const std::uint64_t o = offsets[static_cast<std::size_t>(q)];
      inputs[static_cast<std::size_t>(q)] = q == me && !offset ? in + at
                                            : o == ShmSegment::kNoOffset
                                                ? seg.workspace_in(q, b) + in_workspace
                                                : seg.peer_address(q, o) + at;
    }
    combine_in_rank_order(out + first * eb, inputs, m, type, op);
  }
  // Peers read the sends in the arena where they lie: none may change before all are done.
  if (any_in_arena(offsets)) seg.wait_all(seg.publish(), kName);
}

void shm_allgather(ShmSegment& seg, const void* send, void* recv, std::size_t send_count,
                   DType type) {
  static constexpr const char* kName = "shm_allgather";
  seg.require_usable(kName);
  const std::size_t eb = dtype_bytes(type);
  if (send_count == 0) return;
  const int n = seg.size();
  const int me = seg.rank();
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t block_bytes = send_count * eb;
  std::byte* my_block = out + static_cast<std::size_t>(me) * block_bytes;
  if (n == 1) return copy_if_distinct(send, recv, block_bytes);
  const std::optional<std::uint64_t> offset = seg.arena_offset(send, block_bytes);
  seg.begin_input(offset.value_or(ShmSegment::kNoOffset));
  const std::size_t piece_max = seg.workspace_bytes() / eb;
  std::vector<std::uint64_t> offsets;
  for (std::size_t first = 0; first < send_count; first += piece_max) {
    const std::size_t m = std::min(piece_max, send_count - first);
    const int b = seg.next_buffer();
    if (!offset) std::memcpy(seg.workspace_in(me, b), in + first * eb, m * eb);
    seg.wait_all(seg.publish(), kName);
    if (offsets.empty()) {
      offsets = input_offsets(seg);
      if (all_in_arena(offsets)) {
        allgather_whole_zero_copy(seg, offsets, out, block_bytes, kName);
        return copy_if_distinct(send, my_block, block_bytes);
      }
    }
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      const std::uint64_t o = offsets[static_cast<std::size_t>(q)];
      const std::byte* from = o == ShmSegment::kNoOffset ? seg.workspace_in(q, b)
                                                         : seg.peer_address(q, o) + first * eb;
      std::memcpy(out + static_cast<std::size_t>(q) * block_bytes + first * eb, from, m * eb);
    }
  }
  // Peers read the sends in the arena where they lie: none may change before all are done.
  if (any_in_arena(offsets)) seg.wait_all(seg.publish(), kName);
  copy_if_distinct(send, my_block, block_bytes);
}

void shm_broadcast(ShmSegment& seg, void* data, std::size_t count, DType type, int root) {
  static constexpr const char* kName = "shm_broadcast";
  seg.require_usable(kName);
  if (root < 0 || root >= seg.size()) {
    throw std::invalid_argument("shm_broadcast: root is not a rank of the node communicator");
  }
  const std::size_t eb = dtype_bytes(type);
  if (count == 0 || seg.size() == 1) return;
  auto* bytes = static_cast<std::byte*>(data);
  const std::size_t piece_max = seg.workspace_bytes() / eb;
  for (std::size_t first = 0; first < count; first += piece_max) {
    const std::size_t m = std::min(piece_max, count - first);
    const int b = seg.next_buffer();
    if (seg.rank() == root) std::memcpy(seg.workspace_in(root, b), bytes + first * eb, m * eb);
    seg.wait_all(seg.publish(), kName);
    if (seg.rank() != root) std::memcpy(bytes + first * eb, seg.workspace_in(root, b), m * eb);
  }
}

}  // namespace mpitrain::detail
