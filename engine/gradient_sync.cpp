// GradientSync (see gradient_sync.hpp). Cost per synchronising step with P gradient values in
// B buckets on n ranks: B allreduces of P values in total on the communication thread (or the
// calling thread with overlap off or ReduceOn::caller; bf16/f16 wire types round and widen
// the values inside the allreduce, see Communicator::allreduce(std::span<float>, ...)), and
// O(parameters)
// bookkeeping; nothing on non-synchronising micro-steps. The unused-parameter error (policy
// error) adds one allgather and one allgatherv of the names.

#include "mpitrain/engine/gradient_sync.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/engine/cores_of_this_thread.hpp"
#include "mpitrain/tensor/aligned_storage.hpp"

namespace mpitrain {
namespace {

constexpr std::size_t kAlignFloats = 16;  // 64 bytes: buckets never share a cache line

std::size_t align_up(std::size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

}  // namespace

void GradientSync::FreeDeleter::operator()(void* p) const noexcept { std::free(p); }

GradientSync::GradientSync(std::vector<SyncedParameter> params, CommStream& stream,
                           GradientSyncOptions options)
    : stream_(stream), comm_(stream.communicator()), options_(options) {
  if (options_.comm_dtype != DType::f32 && options_.comm_dtype != DType::bf16 &&
      options_.comm_dtype != DType::f16) {
    throw std::invalid_argument("GradientSync: comm_dtype must be f32, bf16 or f16, not " +
                                std::string(to_string(options_.comm_dtype)));
  }
  if (options_.bucket_cap_bytes == 0 || options_.first_bucket_bytes == 0) {
    throw std::invalid_argument("GradientSync: bucket_cap_bytes and first_bucket_bytes must be > 0");
  }
  for (const SyncedParameter& sp : params) {
    if (sp.parameter == nullptr) throw std::invalid_argument("GradientSync: null parameter");
    if (!index_.emplace(sp.parameter, params_.size()).second) {
      throw std::invalid_argument("GradientSync: parameter '" + sp.parameter->name +
                                  "' is registered twice");
    }
    const std::size_t numel = sp.parameter->value.numel();
    if (!sp.external_grad.empty() && sp.external_grad.size() != numel) {
      throw std::invalid_argument("GradientSync: gradient buffer of '" + sp.parameter->name +
                                  "' holds " + std::to_string(sp.external_grad.size()) +
                                  " values, the parameter " + std::to_string(numel));
    }
    params_.push_back(Entry{sp.parameter, sp.external_grad, 0, 0, numel});
    has_external_ = has_external_ || !sp.external_grad.empty();
  }

  sharded_ = options_.shard && comm_.size() > 1;
  reduce_on_caller_ = options_.reduce_on == ReduceOn::caller ||
                      (options_.reduce_on == ReduceOn::automatic && cores_of_this_thread() == 1);
  lay_out_buckets();
  allocate_storage();
  if (sharded_) make_shard();
  if (options_.comm_dtype != DType::f32) allocate_wire();
  ready_.assign(params_.size(), 0);
  pending_.assign(buckets_.size(), 0);
  futures_.resize(buckets_.size());
  bucket_finite_.resize(buckets_.size());
  for (std::size_t k = 0; k < params_.size(); ++k) bind(k);
}

void GradientSync::lay_out_buckets() {
  // Buckets in reverse registration order; a bucket closes before a parameter that would
  // take it past its cap (a parameter larger than the cap gets a bucket of its own).
  const std::size_t wire_elem = dtype_bytes(options_.comm_dtype);
  for (std::size_t k = params_.size(); k-- > 0;) {
    const std::size_t bytes = params_[k].numel * wire_elem;
    if (buckets_.empty()) {
      buckets_.emplace_back();
    } else {
      const std::size_t cap =
          buckets_.size() == 1 ? options_.first_bucket_bytes : options_.bucket_cap_bytes;
      if (buckets_.back().wire_bytes + bytes > cap) buckets_.emplace_back();
    }
    Bucket& b = buckets_.back();
    b.params.push_back(k);
    b.count += params_[k].numel;
    b.wire_bytes += bytes;
  }
  const std::size_t n = static_cast<std::size_t>(comm_.size());
  std::size_t offset = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.offset = offset;
    std::size_t at = offset;
    for (std::size_t k : bucket.params) {
      params_[k].bucket = b;
      params_[k].offset = at;
      at += params_[k].numel;
    }
    offset = at;
    if (b + 1 == buckets_.size()) {
      unused_slot_ = offset;  // one more element travels with the last bucket
      bucket.wire_bytes += wire_elem;
      offset += 1;
    }
    if (sharded_) {
      // n blocks of 64-byte multiples: every rank's block starts on a cache line.
      bucket.block = align_up((offset - bucket.offset + n - 1) / n);
      bucket.shard_offset = shard_count_;
      shard_count_ += bucket.block;
      offset = bucket.offset + n * bucket.block;
      bucket.wire_bytes = n * bucket.block * wire_elem;
    }
    offset = align_up(offset);
  }
  storage_count_ = std::max<std::size_t>(offset, kAlignFloats);
}

void GradientSync::allocate_wire() {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    // Sharded: the n blocks sent, then the block received.
    const std::size_t count =
        sharded_ ? (static_cast<std::size_t>(comm_.size()) + 1) * buckets_[b].block
                 : buckets_[b].count + (b + 1 == buckets_.size() ? 1 : 0);
    auto* w = static_cast<std::uint16_t*>(allocate_aligned(std::max<std::size_t>(count, 1) * sizeof(std::uint16_t)));
    wire_.emplace_back(w);
    std::fill_n(w, count, std::uint16_t{0});  // touched once here, not in the first step
    wire_count_.push_back(count);
  }
}

GradientSync::~GradientSync() {
  // Reductions in flight reference this object: let them finish before it goes away.
  for (CommFuture& f : futures_) {
    if (!f.valid()) continue;
    try {
      f.wait();
    } catch (...) {  // already reported by finish(), or the object is being torn down by one
    }
  }
  // Give every rebound gradient its own storage again, so no Parameter keeps a view of ours.
  for (Entry& e : params_) {
    if (!e.external_grad.empty() || e.parameter->grad.data() != storage_data_ + e.offset) continue;
    try {
      Tensor own(e.parameter->value.shape());
      std::copy_n(storage_data_ + e.offset, e.numel, own.data());
      e.parameter->grad = std::move(own);
    } catch (...) {
      e.parameter->grad = Tensor();
    }
  }
}

void GradientSync::bind(std::size_t index) {
  Entry& e = params_[index];
  float* slot = storage_data_ + e.offset;
  if (!e.external_grad.empty()) {
    std::copy(e.external_grad.begin(), e.external_grad.end(), slot);
  } else if (e.parameter->grad.data() != slot || e.parameter->grad.numel() != e.numel) {
    // First binding, or someone replaced the gradient tensor since: move it (back) in.
    e.parameter->rebind_grad(std::span<float>(slot, e.numel));
  }
}

void GradientSync::begin_sync() {
  if (in_sync_) throw std::logic_error("GradientSync::begin_sync: a synchronisation is already open");
  std::fill(ready_.begin(), ready_.end(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].params.size();
  std::fill(bucket_finite_.begin(), bucket_finite_.end(), std::nullopt);
  if (!buckets_.empty()) storage_data_[unused_slot_] = 0.0f;
  next_launch_ = 0;
  launched_early_ = 0;
  any_ready_ = false;
  in_sync_ = true;
}

std::size_t GradientSync::index_of(const nn::Parameter& p) const {
  const auto it = index_.find(&p);
  if (it != index_.end()) return it->second;
  throw std::invalid_argument("GradientSync: parameter '" + p.name + "' is not synchronised here");
}

void GradientSync::mark_ready(const nn::Parameter& p) {
  if (!in_sync_) return;
  mark_ready(index_of(p));
}

void GradientSync::mark_ready(std::size_t index) {
  if (index >= params_.size()) {
    throw std::out_of_range("GradientSync::mark_ready: index " + std::to_string(index) + " of " +
                            std::to_string(params_.size()) + " parameters");
  }
  if (!in_sync_) return;
  if (ready_[index]) {
    throw std::logic_error("GradientSync: parameter '" + params_[index].parameter->name +
                           "' was reported ready twice in one backward (its bucket may already "
                           "be in flight)");
  }
  ready_[index] = 1;
  last_ready_ = std::chrono::steady_clock::now();
  any_ready_ = true;
  bind(index);
  const std::size_t b = params_[index].bucket;
  if (--pending_[b] == 0 && options_.overlap && comm_.size() > 1) launch_ready_buckets();
}

void GradientSync::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) {
    launch(next_launch_++);
    ++launched_early_;
  }
}

void GradientSync::launch(std::size_t bucket) {
  if (reduce_on_caller_) {
    // A failed reduction ends the synchronisation here, so that a caller that goes on to
    // finish() is told (finish without begin_sync) instead of issuing fewer collectives than
    // its peers.
    try {
      reduce(bucket);
    } catch (...) {
      abort();
      throw;
    }
    return;
  }
  futures_[bucket] = stream_.submit([this, bucket](const Communicator&) { reduce(bucket); });
}

void GradientSync::reduce(std::size_t bucket) {
  const Communicator::CallSite site(comm_, "Engine::backward");
  if (sharded_) {
    reduce_scatter(bucket);
    return;
  }
  const Bucket& b = buckets_[bucket];
  const std::size_t count = b.count + (bucket + 1 == buckets_.size() ? 1 : 0);
  // bf16/f16: the fp32 values are rounded and widened inside the allreduce (no conversion
  // pass of their own), with the bucket's wire buffer as scratch; only this task uses it.
  std::span<std::uint16_t> scratch;
  if (!wire_.empty()) scratch = std::span<std::uint16_t>(wire_[bucket].get(), wire_count_[bucket]);
  bucket_finite_[bucket] = comm_.allreduce(std::span<float>(storage_data_ + b.offset, count),
                                           ReduceOp::sum, options_.comm_dtype, bucket_algorithm_,
                                           scratch);
}

SyncReport GradientSync::finish() {
  if (!in_sync_) throw std::logic_error("GradientSync::finish without begin_sync");
  SyncReport report;
  report.buckets_launched_early = launched_early_;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    if (ready_[k]) continue;
    ++report.unused_local;
    report.unused_names.push_back(params_[k].parameter->name);
    bind(k);  // an external gradient still has to be copied in
    ready_[k] = 1;
    --pending_[params_[k].bucket];
  }
  // Exposed communication starts when backward produced its last gradient: on a core shared
  // with the communication thread, the caller may not even run between that moment and this
  // call (the woken worker preempts it), so finish()'s own waiting would miss that time.
  const auto start = any_ready_ ? last_ready_ : std::chrono::steady_clock::now();
  try {
    if (comm_.size() > 1 && !buckets_.empty()) {
      if (report.unused_local > 0 && next_launch_ == buckets_.size()) {
        throw std::logic_error("GradientSync: the last bucket left before its unused count was known");
      }
      // 1 per rank with unused parameters: exact in every wire type up to 256 ranks. Once
      // the last bucket has left (all parameters ready), its element is in flight and
      // begin_sync() already set it to 0.
      if (next_launch_ < buckets_.size()) storage_data_[unused_slot_] = report.unused_local > 0 ? 1.0f : 0.0f;
      // The buckets already launched complete first; the stream is then idle, and the rest
      // are reduced right here, in bucket order (handing them to the worker thread would only
      // add a wake-up: nothing is left to overlap with). The ranks' collective order is the
      // bucket order either way.
      for (CommFuture& f : futures_) {
        if (f.valid()) f.wait();
        f = CommFuture();
      }
      while (next_launch_ < buckets_.size()) reduce(next_launch_++);
      // Sharded, the reduced count is in one rank's block only: every rank needs it.
      const float ranks_with_unused =
          sharded_ ? comm_.allreduce_value(report.unused_local > 0 ? 1.0f : 0.0f, ReduceOp::sum)
                   : storage_data_[unused_slot_];
      report.ranks_with_unused = static_cast<std::size_t>(std::lround(ranks_with_unused));
    } else {
      report.ranks_with_unused = report.unused_local > 0 ? 1 : 0;
    }
  } catch (...) {
    abort();
    throw;
  }
  report.wait_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (comm_.size() > 1) report.bucket_finite = bucket_finite_;
  copy_out();
  in_sync_ = false;
  holds_mean_ = comm_.size() > 1 && !sharded_;
  if (options_.unused_parameters == UnusedParameterPolicy::error && report.ranks_with_unused > 0) {
    // Every rank knows that some rank has unused parameters (the reduced count), so every
    // rank takes this path and the names can be gathered: each rank's message lists them all.
    std::string mine;
    for (const std::string& n : report.unused_names) mine += (mine.empty() ? "" : ", ") + n;
    const std::vector<std::string> all =
        comm_.size() > 1 ? comm_.allgather_strings(mine) : std::vector<std::string>{mine};
    std::string listed;
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (all[r].empty()) continue;
      listed += (listed.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + all[r]);
    }
    throw std::runtime_error(
        "GradientSync (rank " + std::to_string(comm_.rank()) + "): " +
        std::to_string(report.ranks_with_unused) +
        " rank(s) have parameters that received no gradient in this backward: " + listed +
        ". Give them a gradient in every synchronising backward, or use unused_parameters = "
        "zero to reduce whatever their gradients accumulated since zero_grad (zero when they "
        "took part in no micro-step).");
  }
  return report;
}

void GradientSync::copy_out() {
  for (Entry& e : params_) {
    if (!e.external_grad.empty()) std::copy_n(storage_data_ + e.offset, e.numel, e.external_grad.data());
  }
}

void GradientSync::abort() noexcept {
  for (CommFuture& f : futures_) {
    if (!f.valid()) continue;
    try {
      f.wait();
    } catch (...) {  // the backward's own exception is the one that matters
    }
    f = CommFuture();
  }
  in_sync_ = false;
}

std::vector<std::span<float>> GradientSync::gradient_spans() {
  std::vector<std::span<float>> spans;
  spans.reserve(buckets_.size());
  for (const Bucket& b : buckets_) spans.emplace_back(storage_data_ + b.offset, b.count);
  return spans;
}

std::span<float> GradientSync::gradient_slot(std::size_t index) {
  const Entry& e = params_.at(index);
  return {storage_data_ + e.offset, e.numel};
}

void GradientSync::zero_grad() {
  std::fill_n(storage_data_, storage_count_, 0.0f);
  for (Entry& e : params_) {
    if (!e.external_grad.empty()) std::fill(e.external_grad.begin(), e.external_grad.end(), 0.0f);
  }
  holds_mean_ = false;
}

void GradientSync::divide_held_mean() {
  if (!holds_mean_) return;
  const float n = static_cast<float>(comm_.size());
  for (float* g = storage_data_; g != storage_data_ + storage_count_; ++g) *g /= n;
  for (Entry& e : params_) {
    for (float& g : e.external_grad) g /= n;
  }
  holds_mean_ = false;
}

void GradientSync::allocate_storage() {
  // Ranks of one node keep their buckets in the node's shared segment, at the same offset on
  // every rank, so the shm allreduce reads each peer's gradients where backward wrote them
  // (no copy in). Every rank allocates the same size here (prepare agreed on the layout).
  bucket_algorithm_ = options_.algorithm;
  if (comm_.size() > 1 && comm_.node_count() == 1) {
    shared_storage_ = comm_.allocate_shared(storage_count_ * sizeof(float));
    // Zero-filled, 64-byte aligned; released when this object goes (a later prepare on the same
    // communicator returns it).
    storage_data_ = reinterpret_cast<float*>(shared_storage_.bytes().data());
    // fp32 buckets there are reduced in place by shm without a copy whatever their size,
    // which the size bands of the default table (measured on copied buffers) do not know.
    if (options_.algorithm == kDefaultAlgorithm && options_.comm_dtype == DType::f32) {
      bucket_algorithm_ = "shm";
    }
    return;
  }
  storage_.reset(static_cast<float*>(allocate_aligned(storage_count_ * sizeof(float))));
  storage_data_ = storage_.get();
  std::fill_n(storage_data_, storage_count_, 0.0f);
}

}  // namespace mpitrain
