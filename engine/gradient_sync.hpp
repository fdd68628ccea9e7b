#pragma once
// GradientSync: data-parallel gradient averaging in flat buckets (what DDP's Reducer does).
//
// - Buckets hold parameters in reverse registration order (backward produces gradients
//   roughly in that order), each bucket up to `bucket_cap_bytes` of wire data, the first one
//   up to `first_bucket_bytes` so that communication starts early in backward. A parameter
//   larger than the cap gets a bucket of its own. Bytes count the message as sent
//   (comm_dtype), so a bf16 bucket holds twice as many values as an f32 one.
// - Gradients live inside the bucket storage: each Parameter's `grad` is rebound into its
//   slot (Parameter::rebind_grad), so backward accumulates straight into the buffers that are
//   reduced; no copy in, no copy out. A parameter whose gradient buffer belongs to someone
//   else (bring your own model, `external_grad`) is copied in when it is ready and copied
//   out after the reduction.
// - Averaging: the buckets are SUMMED. The division by the world size is folded into the
//   loss gradient, which the engine scales by 1 / (accumulation_steps * world_size) anyway
//   (Engine::loss_gradient_scale), so averaging costs no pass over the gradients. Dividing
//   first also keeps 16-bit wire types in range: each rank sends its gradient already
//   divided by n, so every partial sum of a reduction (rounded to the wire type at each
//   combine, in fp32 in between) is at most the largest per-rank gradient in magnitude,
//   whatever n. Summing first and dividing afterwards would carry partial sums up to n
//   times larger: with fp16 on the wire, a gradient of 65520 / n on every rank would
//   already become inf (tests/engine/mixed_precision_test.cpp checks 61440 at 1-4 ranks).
// - A bucket is launched on the CommStream as soon as the last of its gradients is ready
//   (mark_ready, called from the model's grad-ready hook), in bucket order: when bucket k+1
//   is ready before bucket k, it waits for k, so every rank issues the same collectives in
//   the same order whatever order its backward reports. With overlap on (and more than one
//   rank) every bucket whose gradients were all reported, the last bucket included, is
//   launched from mark_ready: on the CommStream (ReduceOn::worker), or reduced right there
//   on the thread that reported it (ReduceOn::caller, automatic on a rank bound to one
//   core); finish() waits for those, then reduces on the calling thread the buckets that
//   never completed (from the first bucket holding an unused parameter on, in bucket
//   order). With overlap off, finish() reduces every bucket on the calling thread. Same
//   collectives, same results, bit for bit.
// - Unused parameters (no mark_ready during a synchronising backward) are detected in
//   finish(). Their slots are NOT zeroed: they hold whatever this rank accumulated into them
//   since zero_grad (earlier micro-steps of the window; zero when the parameter took no part
//   in any of them) and are reduced with their bucket, so ranks that used the parameter get
//   the sum of what every rank accumulated. A parameter unused on every rank keeps a zero
//   (or accumulated) gradient, and the optimizer still steps it (weight decay, momentum,
//   Adam moments), unlike torch, whose optimizers skip a parameter whose grad is None.
//   Policy `error` instead raises an error on EVERY rank (no hang) that names the unused
//   parameters of every rank ("rank r: name, name"): each rank with unused parameters adds
//   1 to one extra element reduced with the last bucket, so all ranks learn of any unused
//   parameter in the same collective, and then gather the names.
//
// - Sharding (ZeRO stage 1, options.shard on more than one rank): each bucket is padded to
//   n blocks of `block` values (block a multiple of 16 floats, so padding is at most
//   16 n - 1 values per bucket) and REDUCE-SCATTERED instead of allreduced: rank r receives
//   block r of every bucket, summed, in its own shard buffer (the parameters are split over
//   the flat layout, so a parameter may straddle two ranks' blocks). Same launch order, same
//   overlap with backward. Parameter::grad keeps this rank's own (unreduced) gradient; the
//   averaged values exist only for this rank's blocks (shard_pieces(), shard_spans()).
//   After the optimizer stepped those pieces, gather_parameters() allgathers every bucket's
//   parameter values (fp32 always) and zeroes the gradient storage. With fp32 on the wire
//   on one node both the allreduce (shm, forced for fp32 buckets) and the reduce-scatter
//   (shm, the default at every size) combine element i as ((x0 + x1) + x2) ... in rank
//   order, so the shard holds bit for bit the values the allreduce gives; across nodes MPI's
//   reduce-scatter may sum in another order (results agree to rounding). The unused-count
//   element is reduced by one 1-value allreduce in finish(), so every rank knows it.
//
// Cost per synchronising step, P gradient values in B buckets on n ranks: B allreduces of
// P * dtype_bytes(comm_dtype) bytes in total (ring: 2 (n-1)/n of that per rank on the wire);
// for bf16/f16 the fp32 gradients are rounded to the wire type and the results widened back
// inside the allreduce (the fused ring: no separate conversion pass; below the ring's
// threshold, MPI's allreduce between a conversion pass each way), on the communication
// thread; O(P / 16) pointer checks. No collective at all outside begin_sync()/finish(), and
// none on one rank.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "mpitrain/collectives/comm_stream.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/dtype.hpp"
#include "mpitrain/collectives/shared_buffer.hpp"
#include "mpitrain/engine/engine_config.hpp"
#include "mpitrain/nn/parameter.hpp"

namespace mpitrain {

// Where a bucket launched during backward (overlap on) is reduced.
enum class ReduceOn {
  // worker when the thread that builds the GradientSync may run on more than one CPU
  // (cores_of_this_thread: hardware threads, so SMT siblings count), caller when on one.
  automatic,
  // The CommStream's worker thread, beside backward: the reduction runs while backward
  // computes when the rank has a core to spare.
  worker,
  // Right away, on the thread that reported the bucket's last gradient ready (inside the
  // model's grad-ready hook; the time of a bucket that is not the last to leave counts as
  // backward's, as the worker's would). On a rank that may run on one CPU only a worker
  // only takes turns with backward, and each bucket then costs two thread switches and a
  // waiter that shares the core: measured 2026-11-28, 2 ranks bound to one core each,
  // train_bench with overlap on, three interleaved pairs: ratio to one rank 1.93 (caller)
  // against 1.81-1.92 (worker) on the small MLP, 1.78-1.82 against 1.72-1.76 and overhead
  // 1.7-3.5% against 5.1-5.9% on the large one; overlap off, 1.94 and 1.78-1.85 in the same
  // runs.
  caller,
};

struct GradientSyncOptions {
  std::size_t bucket_cap_bytes = 25u << 20;
  std::size_t first_bucket_bytes = 1u << 20;
  bool overlap = true;
  ReduceOn reduce_on = ReduceOn::automatic;  // with overlap on
  DType comm_dtype = DType::f32;  // f32, bf16 or f16
  std::string algorithm{kDefaultAlgorithm};  // an allreduce algorithm name
  UnusedParameterPolicy unused_parameters = UnusedParameterPolicy::zero;
  bool shard = false;  // ZeRO stage 1: reduce-scatter into per-rank blocks (more than 1 rank)
};

// The part of one parameter whose averaged gradient this rank holds under sharding.
struct ShardPiece {
  std::size_t param = 0;   // registration index
  std::size_t begin = 0;   // first value within the parameter (flattened)
  std::span<float> grad;   // the averaged gradient of values [begin, begin + grad.size())
};

// Bytes this synchroniser holds on this rank (Engine::memory_report).
struct SyncMemory {
  std::size_t gradient_bytes = 0;  // the flat bucket storage (gradients, padding included)
  std::size_t comm_bytes = 0;      // 16-bit wire scratch and the shard buffer
};

// One parameter to synchronise. external_grad empty: the parameter's grad is rebound into the
// bucket. Otherwise the gradient is read from / written back to external_grad.
struct SyncedParameter {
  nn::Parameter* parameter = nullptr;
  std::span<float> external_grad;
};

// What one synchronisation did, for logs and benchmarks.
struct SyncReport {
  // Exposed communication: from the last gradient reported ready (or finish(), if none was)
  // until every reduction completed.
  double wait_seconds = 0.0;
  std::size_t buckets_launched_early = 0;  // launched from mark_ready, before finish()
  std::size_t unused_local = 0;       // parameters of this rank without a gradient
  std::size_t ranks_with_unused = 0;  // ranks with unused_local > 0 (all ranks agree)
  std::vector<std::string> unused_names;  // this rank's unused parameters
  // Per bucket (bucket order): whether every reduced value is finite, where the reduction
  // found out as it went (shm with the buckets in the node's shared segment, fp32 on the
  // wire, 2 KiB and more; see Communicator::allreduce); std::nullopt where it did not look.
  // Empty on one rank.
  std::vector<std::optional<bool>> bucket_finite;
};

class GradientSync {
 public:
  struct Bucket {
    std::size_t offset = 0;      // first value in the flat storage
    std::size_t count = 0;       // gradient values (the unused-count element excluded)
    std::size_t wire_bytes = 0;  // bytes sent: (count [+1 on the last bucket]) * comm dtype
    std::vector<std::size_t> params;  // indices into the registration order
    std::size_t block = 0;         // sharded: values per rank's block (storage: n blocks)
    std::size_t shard_offset = 0;  // sharded: where this bucket's block lies in the shard
  };

  // Lays out the buckets and rebinds every gradient into them (keeping the values).
  // `params` in registration order, no duplicates. `stream` runs the overlapped reductions;
  // `comm` must be the stream's communicator.
  GradientSync(std::vector<SyncedParameter> params, CommStream& stream, GradientSyncOptions options);
  // Waits for reductions in flight, then gives each rebound gradient its own storage again.
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Starts a synchronising backward: from now on mark_ready() launches buckets.
  void begin_sync();
  // Reports that parameter `index` (registration order) / `p` has its final gradient. Outside
  // begin_sync()..finish() it does nothing (non-synchronising micro-steps communicate nothing).
  void mark_ready(std::size_t index);
  void mark_ready(const nn::Parameter& p);
  // Launches the buckets not launched yet, waits for all reductions, copies external
  // gradients out. Returns what happened; throws (on every rank, naming every rank's unused
  // parameters; collective) for unused parameters under policy `error`, and rethrows a
  // failed reduction.
  SyncReport finish();
  // Ends a synchronisation without launching more buckets (the backward failed): waits for
  // the reductions already in flight and ignores their errors. Peers that launched more
  // buckets will wait for this rank; the caller is expected to fail the whole job.
  void abort() noexcept;
  // Returns true between begin_sync() and finish().
  bool in_sync() const noexcept { return in_sync_; }
  // Returns where buckets launched during backward are reduced: options().reduce_on, with
  // automatic resolved (worker or caller).
  ReduceOn reduce_on() const noexcept {
    return reduce_on_caller_ ? ReduceOn::caller : ReduceOn::worker;
  }

  // Returns the registration index of `p`; throws std::invalid_argument if it is not synced.
  std::size_t index_of(const nn::Parameter& p) const;
  // Returns the gradient values of each bucket (without padding or the unused-count element);
  // every synchronised gradient lies in exactly one of these spans.
  std::vector<std::span<float>> gradient_spans();
  // Returns the bucket storage of parameter `index` (its numel values).
  std::span<float> gradient_slot(std::size_t index);
  // Copies the bucket storage out to the external gradient buffers (finish() does it; call
  // again after changing the gradients in the buckets, e.g. unscaling or clipping).
  void copy_out();
  // Returns true when some parameter has an external gradient buffer.
  bool has_external() const noexcept { return has_external_; }
  // Sets every gradient to zero (bucket storage and external buffers).
  void zero_grad();
  // When the gradients hold the mean over ranks that a synchronisation left there (not
  // sharded, more than one rank) and no zero_grad() has cleared since: divides every gradient
  // (bucket storage and external buffers) by the number of ranks; otherwise does nothing. A
  // backward that adds to a held mean calls it first: the next reduction sums every rank's
  // copy of that mean, and mean / n summed over n ranks is the mean again (as DDP, which
  // divides whatever the buckets hold), not n times it.
  void divide_held_mean();
  // Returns the layout, bucket 0 first (the first launched).
  const std::vector<Bucket>& buckets() const noexcept { return buckets_; }
  std::size_t parameter_count() const noexcept { return params_.size(); }
  // Returns true when the buckets are reduce-scattered (options.shard on more than 1 rank).
  bool sharded() const noexcept { return sharded_; }
  // Sharded: returns the pieces of parameters this rank owns, in bucket order; each
  // parameter appears at most once (a bucket's block is contiguous).
  const std::vector<ShardPiece>& shard_pieces() const noexcept { return pieces_; }
  // Sharded: returns this rank's averaged gradient values, one span per bucket (padding and
  // the unused-count element left out; possibly empty).
  std::vector<std::span<float>> shard_spans();
  // Sharded, collective, outside a synchronisation: allgathers every bucket's parameter
  // values (this rank's blocks read from the parameters) into every rank's parameters, then
  // zeroes the gradient storage, which held them meanwhile. Cost: B allgathers of P values
  // (fp32) in total, two copies of P values and one zeroing pass.
  void gather_parameters();
  // Returns the bytes held on this rank.
  SyncMemory memory() const noexcept;
  const GradientSyncOptions& options() const noexcept { return options_; }

 private:
  struct Entry {
    nn::Parameter* parameter;
    std::span<float> external_grad;
    std::size_t bucket;
    std::size_t offset;  // in the flat storage
    std::size_t numel;
  };
  void allocate_storage();             // storage_count_ floats for the flat buckets
  void bind(std::size_t index);        // make the gradient live in (or be copied into) its slot
  void launch_ready_buckets();         // launch buckets next_launch_.. whose params are ready
  void launch(std::size_t bucket);
  void reduce(std::size_t bucket);     // the collective of one bucket, on the calling thread
  void reduce_scatter(std::size_t bucket);  // reduce() when sharded
  void lay_out_buckets();              // buckets_, offsets, storage_count_ (constructor)
  void make_shard();                   // shard buffer and pieces (sharded constructor)
  void allocate_wire();                // 16-bit scratch per bucket

  CommStream& stream_;
  const Communicator& comm_;
  GradientSyncOptions options_;
  std::vector<Entry> params_;
  std::unordered_map<const nn::Parameter*, std::size_t> index_;
  std::vector<Bucket> buckets_;
  struct FreeDeleter {
    void operator()(void* p) const noexcept;
  };
  // 64-byte aligned (2 MiB and huge pages from 2 MiB up), buckets at 64-byte offsets.
  // The flat gradient storage: in the communicator's shared segment (shared_storage_) when
  // every rank is on one node, else in private memory (storage_).
  float* storage_data_ = nullptr;
  std::string bucket_algorithm_;  // options_.algorithm, or "shm" for shared fp32 buckets
  SharedBuffer shared_storage_;
  std::unique_ptr<float[], FreeDeleter> storage_;
  std::size_t storage_count_ = 0;
  std::size_t unused_slot_ = 0;  // storage index of the unused-count element
  // Per bucket, when comm_dtype is bf16 or f16: the allreduce's 16-bit scratch of
  // wire_count_[b] values (kept, so no reduction allocates or first-touches a buffer).
  std::vector<std::unique_ptr<std::uint16_t[], FreeDeleter>> wire_;
  std::vector<std::size_t> wire_count_;
  // Sharded: this rank's reduced blocks, bucket after bucket (Bucket::shard_offset).
  bool sharded_ = false;
  std::unique_ptr<float[], FreeDeleter> shard_;
  std::size_t shard_count_ = 0;
  std::vector<ShardPiece> pieces_;

  bool in_sync_ = false;
  bool holds_mean_ = false;                 // see divide_held_mean()
  std::vector<std::uint8_t> ready_;         // per parameter, this sync
  std::vector<std::size_t> pending_;        // per bucket: parameters not ready yet
  std::vector<CommFuture> futures_;         // per bucket, overlapped launches
  bool reduce_on_caller_ = false;           // options_.reduce_on resolved
  // Per bucket, this sync: what its reduction said of the result's finiteness (each written
  // by the task that reduces the bucket, read after finish() waited for it).
  std::vector<std::optional<bool>> bucket_finite_;
  std::size_t next_launch_ = 0;
  bool has_external_ = false;
  std::size_t launched_early_ = 0;
  bool any_ready_ = false;
  std::chrono::steady_clock::time_point last_ready_;  // of the last mark_ready() this sync
};

}  // namespace mpitrain
