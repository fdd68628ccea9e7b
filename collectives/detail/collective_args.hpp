#pragma once
// CollectiveArgs: one collective call as the Communicator hands it to an algorithm (internal
// to collectives/). Counts are elements of `type`.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "mpitrain/collectives/collective.hpp"
#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain::detail {

struct CollectiveArgs {
  Collective op = Collective::allreduce;
  const void* send = nullptr;
  void* recv = nullptr;
  // allreduce, broadcast: the buffer's count; reduce_scatter: the count each rank receives;
  // allgather, allgatherv, gather: the count each rank sends.
  std::size_t count = 0;
  DType type = DType::f32;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;                             // broadcast, gather
  std::span<const std::size_t> recv_counts; // allgatherv: one entry per rank
  // allreduce of fp32 data (type f32, send == recv) sent as `wire` (bf16 or f16); empty for
  // every other call. wire_scratch holds `count` 16-bit values.
  std::optional<DType> wire;
  std::uint16_t* wire_scratch = nullptr;
  // allreduce: where an algorithm that checks its result as it goes, at no pass of its own,
  // says whether every value is finite (shm, f32 in place in the arena); others leave it.
  std::optional<bool>* all_finite = nullptr;

  // Returns true for an allreduce of fp32 data sent as 16-bit values.
  bool has_wire() const noexcept { return wire.has_value(); }
  // Returns the type of the elements as they travel: the wire type, else `type`.
  DType sent_type() const noexcept { return wire.value_or(type); }
  // Returns the bytes one rank contributes, as sent: what selection rules compare.
  std::size_t bytes_as_sent() const noexcept { return count * dtype_bytes(sent_type()); }
};

}  // namespace mpitrain::detail
