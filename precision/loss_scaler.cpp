// LossScaler. Cost: O(1) time and memory per update; the inf/NaN check itself is all_finite.

#include "mpitrain/precision/loss_scaler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace mpitrain {
namespace {

[[noreturn]] void bad_option(const char* name, const std::string& rule, double value) {
  throw std::invalid_argument(
      fmt::format("LossScalerOptions.{} must be {} (got {})", name, rule, value));
}

void validate(const LossScalerOptions& o) {
  const auto as_float = static_cast<float>(o.init_scale);
  if (!(std::isfinite(as_float) && as_float > 0.0f)) {
    bad_option("init_scale", "a positive finite float32", o.init_scale);
  }
  if (!(std::isfinite(o.growth_factor) && o.growth_factor > 1.0)) {
    bad_option("growth_factor", "> 1", o.growth_factor);
  }
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0)) {
    bad_option("backoff_factor", "in (0, 1)", o.backoff_factor);
  }
  if (o.growth_interval < 1) {
    bad_option("growth_interval", ">= 1", static_cast<double>(o.growth_interval));
  }
  if (o.hysteresis < 1) bad_option("hysteresis", ">= 1", static_cast<double>(o.hysteresis));
  if (!(o.min_scale >= 0.0 && o.min_scale <= o.init_scale)) {
    bad_option("min_scale", fmt::format("in [0, init_scale = {}]", o.init_scale), o.min_scale);
  }
}

}  // namespace

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options),
      scale_(static_cast<float>(options.init_scale)),
      hysteresis_left_(options.hysteresis) {
  validate(options_);
}

float LossScaler::scale() const noexcept { return options_.enabled ? scale_ : 1.0f; }

bool LossScaler::update(bool found_inf, std::optional<std::int64_t> step) {
  if (!options_.enabled) return false;
  if (!options_.dynamic) {
    ++updates_;
    if (found_inf) ++skipped_steps_;
    return found_inf;
  }
  if (!found_inf) {
    if (options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
    // torch: the tracker counts this successful step before comparing with the interval.
    const std::int64_t successful = growth_tracker_ + 1;
    if (successful >= options_.growth_interval) {
      const auto grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
      if (std::isfinite(grown)) scale_ = grown;  // never grow past float32 range
      growth_tracker_ = 0;
      hysteresis_left_ = options_.hysteresis;
    } else {
      growth_tracker_ = successful;
    }
    ++updates_;
    return false;
  }
  if (hysteresis_left_ <= 1) {
    // Compared in float32, the type the scale lives in, so that a clamped scale is seen as
    // being at the minimum even when min_scale is not exactly representable.
    const auto min_scale = static_cast<float>(options_.min_scale);
    if (scale_ <= min_scale) {
      const std::string when = step ? fmt::format("at step {}", *step)
                                    : fmt::format("at update {} of this loss scaler", updates_ + 1);
      throw MinLossScaleError(fmt::format(
          "LossScaler: the loss scale reached its minimum (min_scale = {}) and the gradients "
          "still overflow (inf/NaN) {}; the scale cannot be reduced further. The model or the "
          "data produce inf/NaN at any scale: check them, lower min_scale, or train in bf16",
          options_.min_scale, when));
    }
    const auto reduced = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    scale_ = std::max(reduced, min_scale);
  } else {
    --hysteresis_left_;  // tolerated: keep the scale, still skip the step
  }
  growth_tracker_ = 0;
  ++skipped_steps_;
  ++updates_;
  return true;
}

LossScaler::State LossScaler::state() const noexcept {
  return State{static_cast<double>(scale()), growth_tracker_, hysteresis_left_, skipped_steps_};
}

void LossScaler::load_state(const State& state) {
  const auto scale = static_cast<float>(state.scale);
  if (!(std::isfinite(scale) && scale > 0.0f)) {
    throw std::invalid_argument(fmt::format(
        "LossScaler::load_state: scale must be a positive finite float32 (got {})", state.scale));
  }
  if (state.growth_tracker < 0 || state.hysteresis < 1 || state.skipped_steps < 0) {
    throw std::invalid_argument(fmt::format(
        "LossScaler::load_state: counters out of range (growth_tracker = {} must be >= 0, "
        "hysteresis = {} must be >= 1, skipped_steps = {} must be >= 0)",
        state.growth_tracker, state.hysteresis, state.skipped_steps));
  }
  if (!options_.enabled) return;
  skipped_steps_ = state.skipped_steps;
  if (!options_.dynamic) return;
  scale_ = scale;
  growth_tracker_ = state.growth_tracker;
  hysteresis_left_ = std::min(state.hysteresis, options_.hysteresis);
}

}  // namespace mpitrain
