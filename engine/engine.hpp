#pragma once
// Engine: data-parallel training over a Communicator, the C++ counterpart of
// accelerate.Accelerator over PyTorch DDP.
//
//   nn::Sequential model = ...;  nn::AdamW optimizer(...);    // declared before the engine:
//   data::DataLoader loader = ...;                          // it refers to them until it is
//   Engine engine(config, comm);                            // destroyed
//   engine.prepare(model, optimizer, loader, &scheduler);   // in place, see prepare()
//   for (data::Batch batch; engine.next_batch(batch);) {
//     auto micro = engine.accumulate();                     // one micro-step
//     Tensor logits = model.forward(batch.features);
//     auto [loss, grad] = nn::cross_entropy(logits, batch.labels);
//     engine.backward(grad);                                // synchronises on sync steps
//     if (engine.sync_gradients()) engine.clip_grad_norm(1.0);
//     engine.step();                                        // optimizer + scheduler, sync steps only
//     engine.zero_grad();
//   }
//
// Micro-steps and synchronisation. Each backward() is one micro-step (accumulate() makes the
// micro-step explicit, as Accelerate's accumulate() context does). A micro-step synchronises
// gradients when it is the gradient_accumulation_steps-th since the last synchronisation, or
// (sync_with_dataloader) when its batch is the training loader's last of the epoch; never
// inside a no_sync() guard. Non-synchronising micro-steps communicate nothing. step(),
// zero_grad() and clip_grad_*() act only after a synchronising backward.
//
// Averaging. backward() multiplies the loss gradient by loss_gradient_scale() =
// loss_scale / (gradient_accumulation_steps * world_size) (a multiply of the small
// (batch, outputs) tensor that the 1/accumulation_steps division needs anyway), and the
// buckets are summed: after a synchronising backward every rank holds the mean over ranks of
// the accumulated mean-loss gradients, bit-identical on every rank. A backward that adds to
// such a mean without zero_grad() in between (a second loss, a forgotten zero_grad) first
// divides it by world_size, so the next synchronisation gives that mean plus the new one, as
// DDP does (summing every rank's copy as it is would count it world_size times).
// ZeRO stage 1 (EngineConfig::zero_stage = 1, more than one rank): the buckets are
// reduce-scattered instead, each rank holds the mean for its shard only (Parameter::grad keeps
// its own unreduced gradient), step() updates the shard with a copy of the optimizer whose
// state covers the shard alone and allgathers the parameters (engine_zero.cpp).
//
// Mixed precision: mixed_precision fp16 scales the loss by a dynamic loss scale (LossScaler,
// torch GradScaler semantics). The scale is removed exactly once per optimizer step, in the
// same pass as clipping (clip_grad_norm) or in step(); the inf/NaN check runs once per step
// on the synchronised gradients, which are identical on every rank, so all ranks agree
// without another collective, and a step with inf/NaN is skipped (and still counted) while
// the scaler backs off. bf16 and fp32 follow nan_policy (error, or skip).
//
// Threads: the Engine owns a CommStream; bucket reductions run on its worker during
// backward (overlap on), or on the backward thread itself as each bucket becomes ready when
// that thread may run on one CPU only (GradientSync's ReduceOn::caller). Every other
// collective of the engine runs on the calling thread while the stream is idle (it is idle
// outside backward), so the ranks' collective order is the program order.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_manager.hpp"
#include "mpitrain/checkpoint/checkpointable.hpp"
#include "mpitrain/checkpoint/save_model.hpp"
#include "mpitrain/collectives/comm_stream.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/engine/engine_config.hpp"
#include "mpitrain/engine/engine_phase.hpp"
#include "mpitrain/engine/gradient_sync.hpp"
#include "mpitrain/nn/module.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/optimizer.hpp"
#include "mpitrain/nn/parameter.hpp"
#include "mpitrain/nn/rng.hpp"
#include "mpitrain/tensor/tensor.hpp"
#include "mpitrain/precision/loss_scaler.hpp"

namespace mpitrain {

struct EngineCheckpointGroup;  // engine/detail/checkpoint_group.hpp

// The engine's counters: what a checkpoint stores under /engine (DESIGN.md section 5).
struct EngineState {
  std::uint64_t step = 0;              // optimizer steps, a step skipped for inf/NaN included
  std::uint64_t micro_step = 0;        // backward passes
  std::uint64_t epoch = 0;             // the training loader's epoch
  std::uint64_t batches_in_epoch = 0;  // batches of that epoch consumed (next_batch)
  std::uint64_t samples_seen = 0;      // real training examples consumed, all ranks together
  std::uint64_t skipped_steps = 0;     // steps skipped for inf/NaN gradients
};

// A parameter that lives in the user's own buffers (bring your own model).
struct ExternalParameter {
  std::string name;
  Shape shape;
  std::span<float> value;  // numel(shape) values, fp32
  // numel(shape) values the user's backward accumulates into; empty: the engine provides
  // the storage (Engine::gradient(name)), inside its buckets, which saves two copies.
  std::span<float> grad;
};

// A model buffer in the user's own storage (bring your own model): state that is not trained
// but belongs to the model (BatchNorm running statistics and counters). Exactly one of
// `value` and `integers` holds numel(shape) values; `integers` (int64) at most one value.
struct ExternalBuffer {
  std::string name;
  Shape shape;
  std::span<float> value;
  std::span<std::int64_t> integers;
};

// Timing of the last synchronising backward, for benchmarks and logs.
struct BackwardTimings {
  double backward_seconds = 0.0;  // the whole backward() call
  // Exposed communication: from the model's last gradient until all reductions completed.
  double comm_wait_seconds = 0.0;
  std::size_t buckets = 0;
  std::size_t buckets_launched_early = 0;
};

// Bytes this rank holds for training (Engine::memory_report), padding included.
struct MemoryReport {
  std::size_t parameter_bytes = 0;  // fp32 values of the prepared parameters
  std::size_t gradient_bytes = 0;   // the flat gradient buckets (and own gradient tensors)
  // The optimizer's slots once every parameter it steps has stepped (they are created at the
  // first step): slots per value (AdamW 2, 3 with amsgrad; SGD 1 with momentum, else 0)
  // times the values this rank steps: all of them at zero_stage 0, its shard at 1.
  std::size_t optimizer_state_bytes = 0;
  std::size_t comm_bytes = 0;  // 16-bit wire scratch and, at zero_stage 1, the shard buffer
};

class Engine {
 public:
  // Validates `config` (std::invalid_argument naming the key). `comm` must outlive the engine.
  // Sets the process-wide OpenBLAS thread count (nn::set_blas_threads; OpenBLAS has one pool
  // per process, so this affects every GEMM of the process, inside the engine or not) to
  // config.blas_threads, or when that is 0 to the node's hardware threads divided by the
  // ranks on the node (at least 1). To keep a count of your own, put it in
  // config.blas_threads, or call nn::set_blas_threads after constructing the engine (nothing
  // in the engine sets it again).
  Engine(EngineConfig config, const Communicator& comm);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineConfig& config() const noexcept { return config_; }
  const Communicator& communicator() const noexcept { return comm_; }
  int rank() const noexcept { return comm_.rank(); }
  int world_size() const noexcept { return comm_.size(); }

  // ---- set-up: what the engine drives, prepared in place (engine_prepare.cpp) ------------
  // Prepares model and optimizer. Collective, and every check is agreed across ranks
  // before anything changes, so an error is thrown on EVERY rank (never a hang):
  //   - invalid arguments on some rank (an optimizer parameter that is not a model
  //     parameter, two parameters with the same name, a training loader prepare_loader()
  //     would reject): std::invalid_argument naming the rank(s) and the causes;
  //   - settings that differ between ranks (EngineConfig::cross_rank_settings: accumulation,
  //     buckets, wire type, overlap, mixed precision, ...; and with a training loader, what
  //     decides the batches each rank reads: data.dataset_size, batch_size, drop_last,
  //     shuffle, seed, mode, epoch, position): std::invalid_argument naming the first
  //     differing key, the ranks and their values;
  //   - parameter names, shapes or order that differ: std::runtime_error naming the first
  //     differing parameter, the ranks and their shapes.
  // Then it broadcasts rank 0's values, lays out the gradient buckets (each Parameter::grad
  // becomes a view into them) and installs the grad-ready hook. The model's first layer
  // skips its input gradient (set_requires_input_grad(false)); set_precision(mixed_precision)
  // is applied; the model's random streams (Module::random_streams: dropout) are replaced by
  // process_rng(1), process_rng(2), ... in order, so every rank draws its own masks,
  // reproducibly (set_seed installs them again). Model and optimizer must outlive the engine
  // (or the next prepare): declare them before the engine.
  void prepare(nn::Module& model, nn::Optimizer& optimizer);
  // Same, plus the training loader (prepare_loader(loader, true); checked and compared across
  // ranks in the same agreement, before anything changes) whose last batch of an epoch ends
  // an accumulation window (sync_with_dataloader), and an optional learning-rate scheduler
  // that step() advances after each optimizer step that really updated the parameters (not
  // after skipped ones). The scheduler must outlive the engine.
  void prepare(nn::Module& model, nn::Optimizer& optimizer, data::DataLoader& loader,
               nn::LrScheduler* scheduler = nullptr);
  // Replaces what step() calls after a real optimizer step (a custom schedule, a counter).
  // Checkpoints still save the scheduler given to prepare() (if any); register a custom
  // schedule's state with register_for_checkpointing.
  void set_scheduler_step(std::function<void()> scheduler_step) {
    scheduler_step_ = std::move(scheduler_step);
  }
  // Shards `loader` for this rank in place: world_size, rank, split_batches and
  // even_batches come from the engine; batch size, shuffle, seed, drop_last and mode stay.
  // A loader whose options differ is rebuilt over the same dataset; the engine then keeps
  // the original loader (and so the dataset's owner) alive for its own lifetime.
  // `training`: throws std::invalid_argument when ranks would read different numbers of
  // batches (even_batches=false with a ragged tail), since their synchronisations would not
  // pair up; uneven loaders are for evaluation with gather_for_metrics. Not collective:
  // it cannot see the other ranks' loaders (prepare(model, optimizer, loader) compares them).
  // On an error the loader is left as it was.
  void prepare_loader(data::DataLoader& loader, bool training = false);
  // Returns a loader over `dataset` sharded as prepare_loader() describes.
  data::DataLoader make_loader(std::shared_ptr<const data::Dataset> dataset,
                               data::DataLoaderOptions options) const;
  // Bring your own model: registers parameters held in the user's buffers, in registration
  // order, with the same cross-rank checks and broadcast as prepare() (a span whose size is
  // not numel(shape) is an invalid argument, reported on every rank). The user's backward
  // then calls grad_ready() for each parameter as its gradient becomes final (any order).
  void register_parameters(std::vector<ExternalParameter> params);
  // Returns the gradient storage of a parameter registered with an empty grad span (in the
  // buckets: valid until the next prepare or register_parameters frees them).
  std::span<float> gradient(std::string_view name);
  // Bring your own optimizer (engine_external.cpp), after register_parameters(): step()
  // steps `optimizer` after each real update and checkpoints save its state_dict() and
  // kind() under /optimizer, as with prepare(). Its parameters() must be registered ones, or
  // none: an adapter over an optimizer that updates the user's buffers itself (mpitrain::
  // libtorch's). It must outlive the engine; prepare() and register_parameters() forget it.
  // Throws std::invalid_argument naming a parameter that is not registered.
  void set_optimizer(nn::Optimizer& optimizer);
  // Bring your own model: registers the model's buffers, which broadcast_buffers() sends from
  // rank 0 and checkpoints save under /buffers/<name> (fp32 datasets; int64 ones as integer
  // attributes). Replaces earlier buffers; prepare() and register_parameters() forget them.
  // Collective, agreed like register_parameters(): names and shapes that differ between
  // ranks, a duplicate name, a size that is not numel(shape) or an int64 buffer of more than
  // one value throw on every rank.
  void register_buffers(std::vector<ExternalBuffer> buffers);
  // Collective: copies rank 0's registered buffers to every rank (one broadcast for the fp32
  // values, one for the int64 ones; nothing on one rank). Call it outside backward (the
  // communication stream must be idle), e.g. before each forward as DDP's broadcast_buffers.
  void broadcast_buffers();
  // Returns the registered buffers in registration order.
  const std::vector<ExternalBuffer>& buffers() const noexcept { return buffers_; }

  // Returns the gradient synchroniser (null before prepare()).
  GradientSync* gradient_sync() noexcept { return sync_.get(); }
  // Returns the prepared parameters in registration order.
  const std::vector<nn::Parameter*>& parameters() const noexcept { return params_; }

  // ---- the training step: batch, backward, step (engine_step.cpp) ------------------------
  // Reads the training loader's next batch (and counts it: batches_in_epoch, samples_seen,
  // epoch). Returns false at the end of the epoch; the loader then stands at the next one.
  bool next_batch(data::Batch& out);

  // Runs the prepared model's backward with loss_grad * loss_gradient_scale() (loss_grad:
  // d(mean loss)/d(output), the shape of the model's last output), synchronising the
  // gradients on a sync micro-step.
  void backward(const Tensor& loss_grad);
  // Bring your own model: runs `run_backward`, which computes the gradients (already
  // multiplied by loss_gradient_scale()) and calls grad_ready() for each parameter.
  void backward(const std::function<void()>& run_backward);
  // Reports that a registered parameter's gradient is final for this backward.
  void grad_ready(std::string_view name);
  void grad_ready(std::size_t index);

  // After a synchronising backward: removes the loss scale, checks for inf/NaN, steps the
  // optimizer (and the scheduler) unless the step is skipped, counts the step. Returns true
  // when the parameters were updated; false on non-sync micro-steps and skipped steps.
  // nan_policy error throws std::runtime_error (on every rank) for inf/NaN gradients, naming
  // the step and the first parameter (in registration order) whose gradient is not finite.
  // With check_collectives (the default) it first completes the comparison, posted by the
  // previous step, of the fingerprints of the collectives every rank issued (one 16-byte
  // allreduce), throwing CollectiveMismatch on every rank when they differ
  // (collective_timeout.hpp), then posts this step's.
  bool step();
  // Returns true when the last synchronising step() skipped the optimizer (inf/NaN
  // gradients: an fp16 overflow, or nan_policy skip), as Accelerate's
  // optimizer_step_was_skipped.
  bool optimizer_step_was_skipped() const noexcept { return phase_.last_step_skipped(); }
  // Zeroes the gradients after a synchronising micro-step; otherwise does nothing.
  void zero_grad();
  // Returns the timings of the last synchronising backward.
  const BackwardTimings& last_backward() const noexcept { return timings_; }
  // Returns the optimizer's whole state dict (nn::Optimizer's keys), the same on every rank:
  // the optimizer's state_dict() at zero_stage 0; at zero_stage 1 (collective) every rank's
  // pieces put together (one allgather of the slot names, one allreduce of the slots' bits).
  // Throws std::logic_error without an optimizer.
  StateDict optimizer_state_dict() const;
  // Returns the bytes of parameters, gradients, optimizer state and communication buffers
  // on this rank (engine_zero.cpp); zeros before prepare().
  MemoryReport memory_report() const;

  // ---- gradient accumulation: micro-steps and synchronisation (engine_step.cpp) ----------
  class MicroStep;
  class NoSync;
  // Starts one micro-step, deciding sync_gradients() for it; the guard ends it. Call it after
  // reading the micro-step's batch (the loader's last batch decides synchronisation), and
  // run one backward inside it. Without accumulate(), each backward() is a micro-step.
  [[nodiscard]] MicroStep accumulate();
  // Disables synchronisation for the micro-steps started while the guard lives.
  [[nodiscard]] NoSync no_sync();
  // Returns true when the current (or last) micro-step synchronises gradients.
  bool sync_gradients() const noexcept { return phase_.sync_gradients(); }

  // ---- clipping the synchronised gradients (engine_clipping.cpp) -------------------------
  // Clips the synchronised gradients to total norm max_norm (norm_type 2 or infinity) and
  // returns the norm before clipping, over all gradients: the same value on every rank
  // (the gradients are identical after synchronisation, so no collective is needed; at
  // zero_stage 1 each rank holds its shard only, and one allreduce of the shards' squared
  // norms (or maxima; a NaN then counts as inf) gives the global norm).
  // Removes the fp16 loss scale in the same pass. Returns NaN without touching anything
  // when the last micro-step did not synchronise.
  double clip_grad_norm(double max_norm, double norm_type = 2.0);
  // Clamps every synchronised gradient to [-clip_value, clip_value] (after removing the
  // loss scale); does nothing on a non-synchronising micro-step. The inf/NaN check of the
  // step runs before the clamp: a step whose gradients held inf/NaN is still skipped (or,
  // with nan_policy error, fails naming the first such parameter), although the clamp turned
  // each inf into +-clip_value (NaN stays NaN).
  void clip_grad_value(double clip_value);

  // ---- precision: loss scaling (mixed_precision fp16) ------------------------------------
  // Returns the factor by which a loss gradient must be multiplied:
  // loss_scale / (gradient_accumulation_steps * world_size).
  float loss_gradient_scale() const noexcept;
  // Returns the loss scale the next backward uses (1 without fp16).
  float loss_scale() const noexcept { return scaler_ ? scaler_->scale() : 1.0f; }
  // Returns the dynamic loss scaler (mixed_precision fp16), or null; its state() is what a
  // checkpoint stores under /scaler.
  LossScaler* loss_scaler() noexcept { return scaler_ ? &*scaler_ : nullptr; }

  // ---- random streams --------------------------------------------------------------------
  // Sets the seed of model_rng() and process_rng(). After prepare(), it also re-installs the
  // prepared model's dropout streams from the new seed (process_rng(1), process_rng(2), ...,
  // as prepare() does), so the masks drawn next depend only on the seed and the rank: the
  // same seed gives the same masks again. It does not touch the weights (initialise them
  // from model_rng() before prepare(), which broadcasts rank 0's), nor a loader's shuffling
  // seed (DataLoaderOptions::seed).
  void set_seed(std::uint64_t seed);
  // Returns the same stream on every rank (model initialisation).
  nn::Rng model_rng() const noexcept { return nn::Rng(config_.seed, 0); }
  // Returns a stream of this rank's own, one per `purpose` (dropout, augmentation, ...):
  // distinct across ranks and purposes, and from model_rng() and make_mlp's streams.
  nn::Rng process_rng(std::uint64_t purpose = 0) const noexcept;

  // ---- counters (EngineState) ------------------------------------------------------------
  const EngineState& state() const noexcept { return state_; }
  std::uint64_t step_count() const noexcept { return state_.step; }
  std::uint64_t micro_step() const noexcept { return state_.micro_step; }
  std::uint64_t epoch() const noexcept { return state_.epoch; }
  std::uint64_t batches_in_epoch() const noexcept { return state_.batches_in_epoch; }
  std::uint64_t samples_seen() const noexcept { return state_.samples_seen; }
  // Restores the counters alone (a checkpoint is taken between optimizer steps: the
  // accumulation window restarts). load_state() below restores everything.
  void restore_counters(const EngineState& state);

  // ---- checkpoints (engine_checkpoint.cpp, engine_checkpoint_groups.cpp) -----------------
  // A checkpoint holds the model, the optimizer (every slot and step count), the scheduler
  // prepared with the loader, the loss scaler, the engine counters, the training loader's
  // position, every rank's random streams (the model's dropout streams), the config text and
  // the objects registered for checkpointing; layout and commit protocol in DESIGN.md
  // section 5 and checkpoint/checkpoint_manager.hpp.
  //
  // Every rank must call save_state(), load_state() and checkpoints() (the first time) at
  // the same point of the program: they are collective, and an error on any rank is thrown
  // on every rank.

  // Returns the manager of config().project's checkpoints. The first call is collective: it
  // removes abandoned folders (temporary ones, and folders without MANIFEST.json).
  checkpoint::CheckpointManager& checkpoints();
  // Saves `object` under /custom/<name> with every checkpoint and restores it on load_state.
  // The object must outlive the engine; `name` is a plain name (no '/'), unique.
  void register_for_checkpointing(std::string name, checkpoint::Checkpointable& object);
  // Sets the configuration text stored in /config (the trainer's effective YAML).
  void set_config_text(std::string yaml) { config_text_ = std::move(yaml); }
  // Collective: saves a checkpoint to <project.dir>/checkpoints/checkpoint_<N> (automatic
  // naming) and applies project.total_limit once it is committed. Returns where it went.
  // Call it between optimizer steps: after step() (also inside the accumulate() guard of the
  // micro-step that stepped), or before the first backward. Inside an accumulation window it
  // throws std::logic_error, since the gradients accumulated so far are not part of a
  // checkpoint.
  checkpoint::SaveResult save_state();
  // Collective: saves to `dir`, which must not exist; numbering and total_limit untouched.
  checkpoint::SaveResult save_state(const std::filesystem::path& dir);

  // What load_state() did beyond restoring the state exactly.
  struct LoadReport {
    std::filesystem::path dir;           // the checkpoint folder loaded
    // newer checkpoints skipped or in the way; world size changed: derived streams, data position
    std::vector<std::string> warnings;
  };
  // Collective: loads the newest committed checkpoint of the project that passes
  // verification (checkpoint::CheckpointManager::verify). Newer ones that fail it are kept,
  // named in a warning, and numbered past: the next automatic save follows the newest. When
  // every checkpoint fails verification, loading the newest throws naming its damage. Throws
  // checkpoint::CheckpointError when there is none.
  LoadReport load_state();
  // Collective: loads checkpoint folder `dir`. All-or-nothing: every file is verified against
  // its manifest before HDF5 reads it, every name and shape is checked, and on any error, on
  // any rank, every rank throws and the running state is left exactly as it was (objects
  // registered for checkpointing included: each is first saved into memory with its own
  // save() and given back through its load() if loading fails anywhere). A checkpoint saved
  // by N ranks loads on M: the replicated state is the same; a rank beyond the saved world
  // size derives its random streams from the seed and its rank, and the loader position is
  // converted by examples seen (both with a warning, which the main process also prints to
  // stderr). The next automatic save after loading checkpoint_<k> of this project is
  // checkpoint_<k+1>; if that or a later one exists, a warning says the save will fail.
  LoadReport load_state(const std::filesystem::path& dir);
  // Collective: the main process writes the weights alone to `dir` (model.h5 or
  // model.safetensors, PyTorch names and shapes; see checkpoint/save_model.hpp). Returns the
  // file written.
  std::filesystem::path save_model(const std::filesystem::path& dir,
                                   checkpoint::ModelFormat format = checkpoint::ModelFormat::hdf5);

  // ---- process helpers and collectives on tensors (engine_process_helpers.cpp) -----------
  bool is_main_process() const noexcept { return comm_.rank() == 0; }
  bool is_local_main_process() const noexcept { return comm_.local_rank() == 0; }
  class MainProcessFirst;
  // The main process runs the guarded block first, then the others (e.g. downloads).
  [[nodiscard]] MainProcessFirst main_process_first();
  // Prints `text` (and a newline) on the main process only, through the log sink
  // (EngineConfig::log) at level "info".
  void print(std::string_view text) const;
  // Sends `text` at `level` ("info", "warning", "error") to the log sink on the main process
  // only (EngineConfig::log; empty: stdout for info, stderr for the others).
  void log(std::string_view level, std::string_view text) const;
  // Returns when every rank has called it.
  void wait_for_everyone() const;

  // Returns every rank's values concatenated in rank order (lengths may differ).
  template <class T> std::vector<T> gather(std::span<const T> values) const;
  // Returns the tensors of all ranks concatenated along dim 0 (rows may differ; the other
  // dimensions must agree, else every rank throws). A 0-d tensor counts as one row.
  Tensor gather(const Tensor& t) const;
  // Returns gather() of the first `real_rows` rows (Batch::real_count): the padding
  // duplicates are dropped, so over an evaluation epoch every example counts exactly once.
  Tensor gather_for_metrics(const Tensor& t, std::size_t real_rows) const;
  template <class T>
  std::vector<T> gather_for_metrics(std::span<const T> values, std::size_t real_count) const;
  // Returns `t` padded along dim 0 with `pad_value` rows up to the largest row count over
  // the ranks (at the end, or at the start when pad_first).
  Tensor pad_across_processes(const Tensor& t, float pad_value = 0.0f,
                                  bool pad_first = false) const;
  // Returns the element-wise sum (ReduceOp::sum) or mean (ReduceOp::avg) over ranks.
  Tensor reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) const;
  double reduce(double value, ReduceOp op = ReduceOp::sum) const;

  // ---- scope guards ---------------------------------------------------------------------------
  class MicroStep {
   public:
    MicroStep(MicroStep&& other) noexcept : engine_(other.engine_) { other.engine_ = nullptr; }
    MicroStep& operator=(MicroStep&&) = delete;
    ~MicroStep() { if (engine_ != nullptr) engine_->end_micro_step(); }
   private:
    friend class Engine;
    explicit MicroStep(Engine* e) : engine_(e) {}
    Engine* engine_;
  };
  class NoSync {
   public:
    NoSync(NoSync&& other) noexcept : engine_(other.engine_) { other.engine_ = nullptr; }
    NoSync& operator=(NoSync&&) = delete;
    ~NoSync() { if (engine_ != nullptr) engine_->phase_.leave_no_sync(); }
   private:
    friend class Engine;
    explicit NoSync(Engine* e) : engine_(e) { engine_->phase_.enter_no_sync(); }
    Engine* engine_;
  };
  class MainProcessFirst {
   public:
    MainProcessFirst(MainProcessFirst&& other) noexcept : engine_(other.engine_) { other.engine_ = nullptr; }
    MainProcessFirst& operator=(MainProcessFirst&&) = delete;
    ~MainProcessFirst();
   private:
    friend class Engine;
    explicit MainProcessFirst(const Engine* e);
    const Engine* engine_;
  };

 private:
  // Returns load_state(dir)'s report with `warnings` first; the next automatic save is at
  // least checkpoint_<next_iteration> (past newer checkpoints load_state() skipped).
  LoadReport load_checkpoint(const std::filesystem::path& dir, std::vector<std::string> warnings,
                             std::optional<std::int64_t> next_iteration);
  // Returns true when the training loader's last batch of the epoch was just read and
  // ends the accumulation window (sync_with_dataloader).
  bool loader_ends_window() const;
  void end_micro_step();
  // Checks names (duplicates join `local_error`), agrees across ranks, then replaces the
  // prepared parameters by `params`, broadcasts rank 0's values and lays out the buckets.
  // Throws before changing anything when some rank's arguments are invalid or differ.
  void setup_sync(std::vector<SyncedParameter> params, std::string_view who,
                  const std::string& description, std::string local_error,
                  const std::string& extra_settings = {});
  // prepare(model, optimizer), with the training loader's checks and settings (if any) in
  // the same agreement; the loader itself is left to prepare_loader().
  void prepare_model(nn::Module& model, nn::Optimizer& optimizer,
                     const data::DataLoader* training_loader);
  // Gives the prepared model's random streams process_rng(1), process_rng(2), ... in order.
  void install_random_streams();
  void run_backward(const std::function<void()>& body);
  // Returns whether every gradient is finite, after removing the loss scale (once per step).
  // Without a loss scale it takes each bucket's answer from the last synchronisation where
  // its reduction gave one (reduced_finite_) instead of reading the bucket again: gradients
  // changed by hand between backward and step are then not checked again.
  bool unscale_and_check();
  std::vector<std::span<float>> gradient_spans();
  // zero_stage 1 (engine_zero.cpp): builds shard_optimizer_ over this rank's pieces of the
  // optimizer's parameters (nothing at stage 0 or on one rank); steps the optimizer (and at
  // stage 1 allgathers the parameters); agrees on a local finite flag across ranks.
  void shard_optimizer();
  void optimizer_step();
  bool finite_on_every_rank(bool finite) const;
  // engine_zero_checkpoint.cpp. Replaces /optimizer of a checkpoint saved at zero_stage 1
  // (kind and hyper-parameters) by the whole state in stage 0's form, assembled from every
  // rank file's pieces, so that any world size and stage loads it; leaves this rank's
  // per-rank /optimizer empty (or drops it) accordingly. Throws CheckpointError for pieces
  // that do not fit this engine's parameters or do not cover them.
  void assemble_optimizer(checkpoint::LoadedCheckpoint& loaded) const;
  // Loads a whole optimizer state (stage 0's form) into this rank's pieces (zero_stage 1).
  void load_shard_from_whole(const StateDict& whole);
  void idle_stream() const;  // the stream is idle: the calling thread may use comm_
  void zero_all_gradients();  // zero_grad() without the sync-step condition
  // Returns the name of the first parameter (registration order) whose gradient holds
  // inf/NaN now, or "?".
  std::string first_non_finite_gradient();
  // Throws std::logic_error naming `who` unless the engine stands between optimizer steps.
  void require_step_boundary(std::string_view who) const;
  template <class T> std::vector<T> gather_impl(std::span<const T> values, DType type) const;
  // engine_checkpoint_groups.cpp: the checkpoint groups the engine owns, declared once
  // (EngineCheckpointGroup), and the functions that capture, check and apply them.
  struct CheckpointGroups;
  static std::span<const EngineCheckpointGroup> checkpoint_groups();
  // engine_checkpoint.cpp: the state as a checkpoint holds it (the model as views), and its
  // application to the live objects, both through checkpoint_groups().
  checkpoint::CheckpointState capture_state(bool views) const;
  void apply_state(const checkpoint::CheckpointState& state, bool per_rank_missing,
                   std::vector<std::string>& warnings);

  EngineConfig config_;
  const Communicator& comm_;
  std::unique_ptr<CommStream> stream_;
  std::unique_ptr<GradientSync> sync_;
  std::vector<nn::Parameter*> params_;
  std::unordered_map<std::string, std::size_t> index_of_name_;
  std::vector<std::unique_ptr<nn::Parameter>> external_params_;  // bring your own model
  std::vector<ExternalBuffer> buffers_;                          // bring your own model
  nn::Module* model_ = nullptr;
  nn::Optimizer* optimizer_ = nullptr;
  // zero_stage 1: a fresh_copy() of optimizer_ over views of this rank's pieces (values in
  // the parameters, gradients in the shard buffer); its learning rate follows optimizer_'s.
  std::vector<std::unique_ptr<nn::Parameter>> shard_params_;
  std::vector<std::size_t> shard_begin_;  // per shard parameter: its first value in the whole
  std::unique_ptr<nn::Optimizer> shard_optimizer_;
  std::function<void()> scheduler_step_;
  nn::LrScheduler* scheduler_ = nullptr;  // the one prepare() got, saved with checkpoints
  std::unique_ptr<checkpoint::CheckpointManager> checkpoints_;
  std::map<std::string, checkpoint::Checkpointable*> custom_;
  std::string config_text_;
  data::DataLoader* train_loader_ = nullptr;
  std::vector<std::unique_ptr<data::DataLoader>> retired_loaders_;

  EngineState state_;
  EnginePhase phase_;  // micro-step, accumulation window and optimizer-step state
  // The first parameter (registration order) whose synchronised gradient was not finite
  // when unscale_and_check() or clip_grad_norm() found one, before any clamping.
  std::string first_non_finite_;
  // Per bucket, whether every gradient the last synchronising backward reduced is finite,
  // where the reduction found out on its way (SyncReport::bucket_finite); cleared by every
  // backward and by zero_grad().
  std::vector<std::optional<bool>> reduced_finite_;
  std::optional<LossScaler> scaler_;  // mixed_precision fp16; its scale changes only in step()
  BackwardTimings timings_;
  Tensor scaled_grad_;       // reused buffer for loss_grad * loss_gradient_scale()
};

template <class T> std::vector<T> Engine::gather(std::span<const T> values) const {
  return gather_impl(values, dtype_of_v<T>);
}

template <class T>
std::vector<T> Engine::gather_for_metrics(std::span<const T> values, std::size_t real_count) const {
  return gather_impl(values.first(std::min(real_count, values.size())), dtype_of_v<T>);
}

template <class T>
std::vector<T> Engine::gather_impl(std::span<const T> values, DType type) const {
  idle_stream();
  const std::vector<std::int64_t> counts64 =
      comm_.allgather_value<std::int64_t>(static_cast<std::int64_t>(values.size()));
  std::vector<std::size_t> counts;
  for (std::int64_t c : counts64) counts.push_back(static_cast<std::size_t>(c));
  std::size_t total = 0;
  for (std::size_t c : counts) total += c;
  std::vector<T> out(total);
  comm_.allgatherv(values.data(), values.size(), out.data(), counts, type);
  return out;
}

}  // namespace mpitrain
