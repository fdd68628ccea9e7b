#pragma once
// EngineConfig: the settings of an Engine. Field names follow the trainer's config keys
// (DESIGN.md section 6); validate() names the key as `section.key` in its errors so that the
// trainer's messages and the library's agree.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_manager.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/dtype.hpp"
#include "mpitrain/precision/loss_scaler.hpp"
#include "mpitrain/precision/precision_mode.hpp"

namespace mpitrain {

// What gradient synchronisation does with a parameter that received no gradient in a
// synchronising backward (see engine/gradient_sync.hpp). Neither policy hangs.
enum class UnusedParameterPolicy : std::uint8_t {
  // Reduce its gradient slot as it stands, not cleared: what this rank accumulated into it
  // since zero_grad (earlier micro-steps of the window), zero when nothing. A parameter
  // unused on every rank is still updated by the optimizer with that gradient (weight
  // decay, momentum, Adam moments), where torch's optimizers would skip a None gradient.
  zero,
  error,  // raise an error on every rank that names every rank's unused parameters
};

// Returns "zero" or "error".
std::string_view to_string(UnusedParameterPolicy policy) noexcept;
// Returns the policy named `name`; throws std::invalid_argument listing the valid names.
UnusedParameterPolicy parse_unused_parameter_policy(std::string_view name);

// What the optimizer step does when the synchronised gradients hold inf or NaN and no
// dynamic loss scaler handles it (mixed_precision bf16 or no).
enum class NanPolicy : std::uint8_t {
  error,  // throw, on every rank, naming the step and the first non-finite parameter
  skip,   // skip the optimizer step (counted in skipped_steps) and go on; zero_grad() clears them
};

// Returns "error" or "skip".
std::string_view to_string(NanPolicy policy) noexcept;
// Returns the policy named `name`; throws std::invalid_argument listing the valid names.
NanPolicy parse_nan_policy(std::string_view name);

// The engine's messages go through one sink: `level` is "info" (Engine::print),
// "warning" or "error"; `text` has no trailing newline. Called on the main process only.
using EngineLog = std::function<void(std::string_view level, std::string_view text)>;

struct EngineConfig {
  // Where the engine's messages go. Empty: info on stdout, warnings and errors on stderr as
  // "mpitrain: warning: ...". The trainer passes its Log (rank prefix, MPITRAIN_LOG_LEVEL,
  // the progress line cleared first).
  EngineLog log;

  // training.*
  std::size_t gradient_accumulation_steps = 1;  // micro-batches per optimizer step
  bool sync_with_dataloader = true;  // also synchronise (and step) on a loader's last batch
  Precision mixed_precision = Precision::fp32;  // fp16 adds a dynamic loss scaler
  // The fp16 loss scaler: torch GradScaler defaults, DeepSpeed's hysteresis, min_scale and
  // static mode (precision/loss_scaler.hpp). Ignored unless mixed_precision is fp16.
  LossScalerOptions loss_scaler;
  NanPolicy nan_policy = NanPolicy::error;

  // distributed.*
  double bucket_cap_mb = 25.0;   // MiB of wire data per gradient bucket
  double first_bucket_mb = 1.0;  // MiB of the first bucket (starts communication early)
  bool overlap = true;           // reduce buckets during backward (communication thread, or
                                 // the backward thread on a rank that may use one CPU only)
  DType grad_comm_dtype = DType::f32;  // f32, bf16 or f16 on the wire; sums in fp32
  // a name of algorithm_names(Collective::allreduce): "default", "mpi", "ring", ...
  std::string allreduce_algorithm{kDefaultAlgorithm};
  UnusedParameterPolicy unused_parameters = UnusedParameterPolicy::zero;
  // distributed.zero_stage: 0 (every rank holds the whole optimizer state) or 1 (ZeRO
  // stage 1: gradients reduce-scattered, each rank steps and stores the optimizer state of
  // its 1/n of the flat bucket layout, parameters allgathered; engine/gradient_sync.hpp).
  int zero_stage = 0;
  // Seconds one wait for peers may last in any collective (Communicator::set_timeout; the
  // trainer's distributed.timeout_s): past it the rank reports the ranks that did not arrive
  // and the job ends (timeout_action). 0: no limit. Unset: the Communicator's setting stays.
  std::optional<double> timeout_s;
  // distributed.timeout_action: abort (the default) or throw; unset: the Communicator's.
  std::optional<TimeoutAction> timeout_action;
  // distributed.check_collectives: compare a fingerprint of the collectives every rank issued,
  // once per optimizer step (Communicator::check_collectives: one 16-byte allreduce, posted at
  // a step and completed at the next, so no step waits for it); ranks whose collectives
  // differ (another reduction, type or algorithm, which MPI completes without a word) stop
  // with CollectiveMismatch on every rank, one step later, instead of diverging silently.
  bool check_collectives = true;
  // distributed.debug_collectives: turn on the Communicator's debug mode (every collective
  // compared across ranks before it runs; also MPITRAIN_DEBUG_COLLECTIVES=1).
  bool debug_collectives = false;

  // data.*
  bool split_batches = false;  // the loader's batch_size is global, split over the ranks
  bool even_batches = true;    // every rank gets the same number of batches (pads by repeating)

  // project.*: where save_state()/load_state() keep checkpoints (DESIGN.md section 5).
  checkpoint::ProjectConfiguration project;

  // OpenBLAS threads of this process, set by the Engine constructor (OpenBLAS has one
  // process-wide pool). 0: the hardware threads of the node divided by the ranks on the
  // node, at least 1, so that ranks sharing a node do not oversubscribe its cores.
  std::size_t blas_threads = 0;

  // seed: model initialisation (the same on every rank) and the per-rank streams.
  std::uint64_t seed = 0;

  // Throws std::invalid_argument naming the first invalid key, its value and what is allowed.
  void validate() const;
  // Returns bucket_cap_mb in bytes (1 MiB = 2^20 bytes), at least one element's worth.
  std::size_t bucket_cap_bytes() const;
  // Returns first_bucket_mb in bytes.
  std::size_t first_bucket_bytes() const;
  // Returns the settings that must be equal on every rank, as (`section.key`, value text)
  // pairs in a fixed order: those that decide the bucket layout, which collectives a step
  // issues and when (accumulation, sync_with_dataloader, the loader sharding, overlap, wire
  // type, algorithm, unused_parameters, nan_policy, check_collectives and debug_collectives,
  // which add collectives, zero_stage), how gradients are scaled
  // (mixed_precision and, with fp16, the loss scaler), or which collectives save_state()
  // and load_state() run (project.automatic_checkpoint_naming). Values are spelt as the
  // trainer's config spells them; numbers exactly (shortest round-trip form), so two values
  // differ exactly when their texts do. Engine::prepare compares them across ranks. Not
  // included, as ranks may differ in them without breaking the collectives: seed (rank 0's
  // weights are broadcast), blas_threads, and the rest of project: total_limit and
  // iteration are rank 0's decision (a save takes rank 0's number, and rank 0 alone deletes
  // old checkpoints), dataset options shape each rank's own file. project.dir may be spelt
  // differently on different nodes (another mount point), but it must name the same shared
  // folder on every rank: load_state() reads the folder rank 0 names, and a rank whose folder
  // is another one makes the first save fail on every rank (its rank file has no temporary
  // folder to go to), which no comparison of path strings could tell in advance.
  std::vector<std::pair<std::string, std::string>> cross_rank_settings() const;
};

}  // namespace mpitrain
