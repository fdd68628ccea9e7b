// GradientSync's sharded mode (ZeRO stage 1, see gradient_sync.hpp): the reduce-scatter of a
// bucket, this rank's pieces of the parameters, and the allgather of the updated values.
//
// Cost per synchronising step, P values in B buckets on n ranks: B reduce-scatters of
// P (+ padding) values in total (the same bytes per rank on the wire as the ring allreduce's
// reduce-scatter half; 16-bit wires add a conversion pass of P values before and of P / n
// after), then, after the optimizer step, B fp32 allgathers of P values, P / n values copied
// from the parameters into the buckets and (n - 1) P / n back (each rank's own block is in
// its parameters already), and one zeroing pass over the storage.
// Ranks of one node keep the buckets in the shared segment: the fp32 reduce-scatters and the
// allgathers then read the peers' buckets where they lie (shm zero copy: no copy in, two
// synchronisations per bucket and collective).

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "mpitrain/engine/gradient_sync.hpp"
#include "mpitrain/precision/convert.hpp"
#include "mpitrain/tensor/aligned_storage.hpp"

namespace mpitrain {
namespace {

// Returns the algorithm for a reduce-scatter or allgather of fp32 storage: "shm" when the
// storage lies in the node's shared segment (`shared`) and the caller left the allreduce
// algorithm to the library: shm then reads every rank's bucket where it is (zero copy, two
// synchronisations per call whatever its size), which the default table's size bands,
// measured on copied buffers, do not know (they send allgathers above 8 KiB to MPI).
std::string_view shard_algorithm(bool shared, std::string_view allreduce_algorithm) {
  return shared && allreduce_algorithm == kDefaultAlgorithm ? std::string_view("shm")
                                                            : kDefaultAlgorithm;
}

}  // namespace

void GradientSync::make_shard() {
  shard_.reset(static_cast<float*>(allocate_aligned(std::max<std::size_t>(shard_count_, 1) * sizeof(float))));
  std::fill_n(shard_.get(), std::max<std::size_t>(shard_count_, 1), 0.0f);
  const std::size_t r = static_cast<std::size_t>(comm_.rank());
  for (const Bucket& b : buckets_) {
    const std::size_t lo = b.offset + r * b.block;
    const std::size_t hi = lo + b.block;
    for (std::size_t k : b.params) {
      const Entry& e = params_[k];
      const std::size_t first = std::max(lo, e.offset);
      const std::size_t last = std::min(hi, e.offset + e.numel);
      if (first >= last) continue;
      pieces_.push_back(ShardPiece{k, first - e.offset,
                                   std::span<float>(shard_.get() + b.shard_offset + (first - lo),
                                                    last - first)});
    }
  }
}

void GradientSync::reduce_scatter(std::size_t bucket) {
  const Bucket& b = buckets_[bucket];
  const std::size_t total = static_cast<std::size_t>(comm_.size()) * b.block;
  float* send = storage_data_ + b.offset;
  float* recv = shard_.get() + b.shard_offset;
  if (options_.comm_dtype == DType::f32) {
    comm_.reduce_scatter(send, recv, b.block, DType::f32, ReduceOp::sum,
                         shard_algorithm(storage_ == nullptr, options_.algorithm));
    return;
  }
  // 16-bit wire: round the n blocks into the bucket's scratch, reduce-scatter them (every
  // combine rounded to 16 bits, as the 16-bit allreduce does) and widen this rank's block.
  std::uint16_t* wire = wire_[bucket].get();
  const std::span<const float> values(send, total);
  if (options_.comm_dtype == DType::bf16) {
    auto* w = reinterpret_cast<bfloat16*>(wire);
    convert(values, std::span<bfloat16>(w, total));
    comm_.reduce_scatter(w, w + total, b.block, DType::bf16, ReduceOp::sum);
    convert(std::span<const bfloat16>(w + total, b.block), std::span<float>(recv, b.block));
  } else {
    auto* w = reinterpret_cast<float16*>(wire);
    convert(values, std::span<float16>(w, total));
    comm_.reduce_scatter(w, w + total, b.block, DType::f16, ReduceOp::sum);
    convert(std::span<const float16>(w + total, b.block), std::span<float>(recv, b.block));
  }
}

std::vector<std::span<float>> GradientSync::shard_spans() {
  std::vector<std::span<float>> spans;
  if (!sharded_) return spans;
  const std::size_t r = static_cast<std::size_t>(comm_.rank());
  for (const Bucket& b : buckets_) {
    const std::size_t lo = b.offset + r * b.block;
    const std::size_t hi = std::min(lo + b.block, b.offset + b.count);
    spans.emplace_back(shard_.get() + b.shard_offset, hi > lo ? hi - lo : 0);
  }
  return spans;
}

void GradientSync::gather_parameters() {
  if (!sharded_) return;
  if (in_sync_) throw std::logic_error("GradientSync::gather_parameters inside a synchronisation");
  const Communicator::CallSite site(comm_, "Engine::step");
  const std::size_t r = static_cast<std::size_t>(comm_.rank());
  const std::string_view algorithm = shard_algorithm(storage_ == nullptr, options_.algorithm);
  std::size_t piece = 0;
  for (std::size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    const Bucket& b = buckets_[bucket];
    // This rank's updated values into its block, then every block to every rank (in place).
    for (; piece < pieces_.size() && params_[pieces_[piece].param].bucket == bucket; ++piece) {
      const ShardPiece& p = pieces_[piece];
      const Entry& e = params_[p.param];
      std::copy_n(e.parameter->value.data() + p.begin, p.grad.size(),
                  storage_data_ + e.offset + p.begin);
    }
    comm_.allgather(storage_data_ + b.offset + r * b.block, storage_data_ + b.offset, b.block,
                    DType::f32, algorithm);
    // The peers' blocks into the parameters; this rank's own block is there already (its
    // pieces were stepped in place, the others left as they were).
    const std::size_t lo = b.offset + r * b.block;
    const std::size_t hi = lo + b.block;
    for (std::size_t k : b.params) {
      const Entry& e = params_[k];
      const std::size_t end = e.offset + e.numel;
      float* value = e.parameter->value.data();
      if (e.offset < lo) {
        std::copy(storage_data_ + e.offset, storage_data_ + std::min(end, lo), value);
      }
      if (end > hi) {
        const std::size_t from = std::max(e.offset, hi);
        std::copy(storage_data_ + from, storage_data_ + end, value + (from - e.offset));
      }
    }
  }
  // The storage held parameters: the next window accumulates from zero.
  zero_grad();
}

SyncMemory GradientSync::memory() const noexcept {
  SyncMemory m;
  m.gradient_bytes = storage_count_ * sizeof(float);
  for (std::size_t c : wire_count_) m.comm_bytes += c * sizeof(std::uint16_t);
  if (sharded_) m.comm_bytes += std::max<std::size_t>(shard_count_, 1) * sizeof(float);
  return m;
}

}  // namespace mpitrain
