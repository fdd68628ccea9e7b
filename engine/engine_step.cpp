// The training step: next_batch(), micro-steps (accumulate(), no_sync()), backward() with
// the gradient synchronisation of sync micro-steps, step() and zero_grad(). Where the engine
// stands is its EnginePhase (engine_phase.hpp).
//
// Cost per optimizer step on n ranks with P parameter values and k micro-steps: k backward
// passes of the model (the loss gradient multiplied once per micro-step, O(batch x
// outputs)); on the synchronising one the bucket reductions of GradientSync (2 (n-1)/n * P
// values per rank on the wire with the ring, overlapped with backward); one pass over P
// values for the inf/NaN check, fused with the fp16 unscale and with clipping when
// clip_grad_norm is called (plus one read pass for the norm); without a loss scale the pass
// skips the buckets whose reductions checked what they combined (shm on one node, fp32 on the
// wire, zero_stage 0, buckets of 2 KiB and more); then the optimizer.

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "mpitrain/engine/engine.hpp"

namespace mpitrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

bool Engine::next_batch(data::Batch& out) {
  if (train_loader_ == nullptr) throw std::logic_error("Engine::next_batch: no training loader prepared");
  const bool got = train_loader_->next(out);
  state_.epoch = static_cast<std::uint64_t>(std::max<std::int64_t>(0, train_loader_->epoch()));
  state_.batches_in_epoch = train_loader_->position();
  if (!got) return false;
  // Real examples of this step over all ranks: every batch but the epoch's last is a full
  // global batch of real examples; the last holds the rest.
  const std::size_t global = train_loader_->sharding().global_batch_size();
  const std::size_t full = (train_loader_->batches_per_epoch() - 1) * global;
  const std::size_t per_epoch = train_loader_->real_samples_per_epoch();
  state_.samples_seen += out.is_last ? (per_epoch > full ? per_epoch - full : 0)
                                     : std::min(global, per_epoch);
  return true;
}

Engine::MicroStep Engine::accumulate() {
  phase_.open_micro_step("Engine::accumulate", loader_ends_window());
  return MicroStep(this);
}

Engine::NoSync Engine::no_sync() { return NoSync(this); }

bool Engine::loader_ends_window() const {
  return config_.sync_with_dataloader && train_loader_ != nullptr &&
         train_loader_->position() > 0 && train_loader_->end_of_epoch();
}

void Engine::end_micro_step() {
  phase_.close_micro_step();
  ++state_.micro_step;
}

float Engine::loss_gradient_scale() const noexcept {
  return static_cast<float>(static_cast<double>(loss_scale()) /
                            (static_cast<double>(config_.gradient_accumulation_steps) *
                             static_cast<double>(comm_.size())));
}

void Engine::run_backward(const std::function<void()>& body) {
  if (!sync_) throw std::logic_error("Engine::backward before prepare() or register_parameters()");
  const bool implicit = phase_.start_backward("Engine::backward", loader_ends_window());
  // Any backward adds to the gradients: what an earlier synchronisation said of them is void.
  reduced_finite_.clear();
  // A backward without zero_grad() after a synchronising one adds to the mean that one left;
  // DDP's result is that mean plus the new one, so divide it before the next sum over ranks.
  sync_->divide_held_mean();
  const auto t0 = Clock::now();
  try {
    if (phase_.sync_gradients()) {
      sync_->begin_sync();
      try {
        body();
      } catch (...) {
        sync_->abort();
        throw;
      }
      SyncReport report = sync_->finish();
      reduced_finite_ = std::move(report.bucket_finite);
      timings_.comm_wait_seconds = report.wait_seconds;
      timings_.buckets = sync_->buckets().size();
      timings_.buckets_launched_early = report.buckets_launched_early;
      timings_.backward_seconds = seconds_since(t0);
      phase_.backward_synchronised("Engine::backward");
      first_non_finite_.clear();
    } else {
      body();
    }
  } catch (...) {
    if (implicit) end_micro_step();
    throw;
  }
  if (implicit) end_micro_step();
}

void Engine::backward(const Tensor& loss_grad) {
  if (model_ == nullptr) throw std::logic_error("Engine::backward(loss_grad) needs a prepared model");
  run_backward([this, &loss_grad] {
    scaled_grad_.resize(loss_grad.shape());
    const float factor = loss_gradient_scale();
    const float* in = loss_grad.data();
    float* out = scaled_grad_.data();
    for (std::size_t i = 0; i < loss_grad.numel(); ++i) out[i] = in[i] * factor;
    model_->backward(scaled_grad_);
  });
}

void Engine::backward(const std::function<void()>& run) { run_backward(run); }

void Engine::grad_ready(std::string_view name) {
  const auto it = index_of_name_.find(std::string(name));
  if (it == index_of_name_.end()) {
    throw std::invalid_argument("Engine::grad_ready: no registered parameter '" + std::string(name) + "'");
  }
  grad_ready(it->second);
}

void Engine::grad_ready(std::size_t index) {
  if (!sync_) throw std::logic_error("Engine::grad_ready before register_parameters()");
  sync_->mark_ready(index);
}

bool Engine::step() {
  if (!phase_.step_pending()) return false;
  // Every rank issued the same collectives up to the last step, or every rank throws
  // CollectiveMismatch here; this step's comparison is posted and completes at the next
  // (no step waits for it).
  if (config_.check_collectives) comm_.check_collectives(/*wait=*/false);
  const bool finite = unscale_and_check();
  phase_.take_step();
  const std::uint64_t this_step = state_.step;
  ++state_.step;
  phase_.record_step(true);
  if (scaler_ && scaler_->enabled()) {
    // Backward passes use scale() until this update; the next window uses the new one.
    const bool skip = scaler_->update(!finite, static_cast<std::int64_t>(this_step));
    if (skip) {
      ++state_.skipped_steps;
      return false;
    }
  } else if (!finite) {
    if (config_.nan_policy == NanPolicy::error) {
      throw std::runtime_error("Engine::step (rank " + std::to_string(comm_.rank()) + "): step " +
                               std::to_string(this_step) + " has inf/NaN gradients, first in '" +
                               first_non_finite_ +
                               "' (the same on every rank after synchronisation); "
                               "nan_policy = error");
    }
    ++state_.skipped_steps;
    return false;
  }
  phase_.record_step(false);
  optimizer_step();
  if (scheduler_step_) scheduler_step_();
  return true;
}

void Engine::zero_grad() {
  if (!phase_.sync_gradients()) return;
  zero_all_gradients();
}

void Engine::zero_all_gradients() {
  reduced_finite_.clear();
  if (!sync_) return;
  sync_->zero_grad();
  // A gradient someone replaced by its own tensor is not in the buckets (yet).
  for (std::size_t k = 0; k < params_.size(); ++k) {
    if (params_[k]->grad.data() != sync_->gradient_slot(k).data()) params_[k]->grad.zero();
  }
}

// Returns the synchronised gradients this rank holds: all of them, or its shard (zero_stage 1).
std::vector<std::span<float>> Engine::gradient_spans() {
  return sync_->sharded() ? sync_->shard_spans() : sync_->gradient_spans();
}

}  // namespace mpitrain
