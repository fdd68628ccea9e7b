// After a synchronising backward: removing the loss scale and checking for inf/NaN (once per
// step), clipping by norm (in the same pass as the unscale) or by value, and naming the
// first non-finite gradient for nan_policy error.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "mpitrain/engine/engine.hpp"
#include "mpitrain/precision/all_finite.hpp"

namespace mpitrain {
namespace {

// Multiplies `values` by `factor` and returns true when every result is finite.
bool scale_and_check(std::span<float> values, float factor) {
  float acc = 0.0f;
  for (float& v : values) {
    v *= factor;
    acc += v * 0.0f;
  }
  return acc == 0.0f;
}

}  // namespace

bool Engine::unscale_and_check() {
  if (phase_.unscaled()) return phase_.finite();
  bool finite = true;
  if (loss_scale() != 1.0f) {
    // torch: inv_scale = float(1 / double(scale)); a power of two, so exact.
    const float inv = static_cast<float>(1.0 / static_cast<double>(loss_scale()));
    for (std::span<float> s : gradient_spans()) finite = scale_and_check(s, inv) && finite;
    sync_->copy_out();
  } else {
    // Unsharded, gradient_spans() has one span per bucket, in bucket order.
    const std::vector<std::span<float>> spans = gradient_spans();
    for (std::size_t k = 0; k < spans.size(); ++k) {
      const bool answered =
          !sync_->sharded() && k < reduced_finite_.size() && reduced_finite_[k].has_value();
      finite = (answered ? *reduced_finite_[k] : all_finite(spans[k])) && finite;
    }
  }
  finite = finite_on_every_rank(finite);  // zero_stage 1: inf/NaN in any shard skips everywhere
  phase_.gradients_checked("Engine::unscale_and_check", finite);
  // Named now, before clip_grad_value can clamp an inf to a finite value.
  if (!finite) first_non_finite_ = first_non_finite_gradient();
  return finite;
}

double Engine::clip_grad_norm(double max_norm, double norm_type) {
  const bool inf_norm = std::isinf(norm_type) && norm_type > 0;
  if (!inf_norm && norm_type != 2.0) {
    throw std::invalid_argument("Engine::clip_grad_norm: norm_type must be 2 or infinity, not " +
                                std::to_string(norm_type));
  }
  if (!(max_norm >= 0.0)) {
    throw std::invalid_argument("Engine::clip_grad_norm: max_norm must be >= 0, not " +
                                std::to_string(max_norm));
  }
  if (!phase_.step_pending()) return std::numeric_limits<double>::quiet_NaN();
  // The gradients are identical on every rank after synchronisation: the norm is local
  // (zero_stage 1: the norm of this rank's shard, combined below).
  const std::vector<std::span<float>> spans = gradient_spans();
  double norm = 0.0;
  for (std::span<const float> s : spans) {
    if (inf_norm) {
      float m = 0.0f;
      for (float v : s) m = std::max(m, std::fabs(v)) + v * 0.0f;  // NaN propagates
      norm = std::max(norm, static_cast<double>(m)) + static_cast<double>(m) * 0.0;
    } else {
      double sq = 0.0;
      for (float v : s) sq += static_cast<double>(v) * static_cast<double>(v);
      norm += sq;
    }
  }
  if (sync_->sharded()) {
    // Each rank holds its shard: the global norm from every shard's squared norm (or maximum;
    // a NaN maximum counts as inf, since a max reduction need not propagate NaN).
    idle_stream();
    const Communicator::CallSite site(comm_, "Engine::clip_grad_norm");
    if (inf_norm && std::isnan(norm)) norm = std::numeric_limits<double>::infinity();
    norm = comm_.allreduce_value(norm, inf_norm ? ReduceOp::max : ReduceOp::sum);
  }
  if (!inf_norm) norm = std::sqrt(norm);
  const double scale = phase_.unscaled() ? 1.0 : static_cast<double>(loss_scale());
  const double true_norm = norm / scale;
  if (!std::isfinite(true_norm)) {
    // The step will be skipped (or fail): the values no longer matter.
    phase_.gradients_checked("Engine::clip_grad_norm", false);
    first_non_finite_ = first_non_finite_gradient();  // before clip_grad_value may clamp
    return true_norm;
  }
  // torch: clip_coef = max_norm / (total_norm + 1e-6), applied when below 1. Removing the loss
  // scale is folded into the same multiplication.
  const double clip_coef = max_norm / (true_norm + 1e-6);
  const double factor = std::min(clip_coef, 1.0) / scale;
  if (factor != 1.0) {
    const float f = static_cast<float>(factor);
    for (std::span<float> s : spans) {
      for (float& v : s) v *= f;
    }
    sync_->copy_out();
  }
  phase_.gradients_checked("Engine::clip_grad_norm", true);
  return true_norm;
}

void Engine::clip_grad_value(double clip_value) {
  if (!(clip_value >= 0.0)) {
    throw std::invalid_argument("Engine::clip_grad_value: clip_value must be >= 0, not " +
                                std::to_string(clip_value));
  }
  if (!phase_.step_pending()) return;
  unscale_and_check();
  const float c = static_cast<float>(clip_value);
  for (std::span<float> s : gradient_spans()) {
    for (float& v : s) v = std::clamp(v, -c, c);
  }
  sync_->copy_out();
}

std::string Engine::first_non_finite_gradient() {
  if (sync_->sharded()) {
    // The first in registration order over every rank's shard (one allreduce).
    std::int64_t first = static_cast<std::int64_t>(params_.size());
    for (const ShardPiece& piece : sync_->shard_pieces()) {
      if (!all_finite(piece.grad)) first = std::min(first, static_cast<std::int64_t>(piece.param));
    }
    idle_stream();
    first = comm_.allreduce_value(first, ReduceOp::min);
    return first < static_cast<std::int64_t>(params_.size()) ? params_[static_cast<std::size_t>(first)]->name : "?";
  }
  for (std::size_t k = 0; k < params_.size(); ++k) {
    if (!all_finite(sync_->gradient_slot(k))) return params_[k]->name;
  }
  return "?";
}

}  // namespace mpitrain
