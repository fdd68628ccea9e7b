#pragma once
// LossScaler: loss scaling for fp16 mixed precision, a small state machine with the semantics
// and defaults of PyTorch's torch.cuda.amp.GradScaler (torch 1.13, `_amp_update_scale_`),
// plus DeepSpeed's hysteresis, minimum scale and static mode.
//
// Use per optimizer step: multiply the loss by scale(), run backward, check the gradients
// (all_finite), call update(found_inf) and skip the optimizer step when it returns true;
// otherwise divide the gradients by the scale() that was used for the backward pass.
//
// Dynamic mode (the default):
// - a step without inf/NaN increments growth_tracker; when it reaches growth_interval the
//   scale is multiplied by growth_factor (kept as is if that would overflow float32) and the
//   tracker restarts at 0;
// - a step with inf/NaN is skipped and resets growth_tracker to 0. With hysteresis h, the
//   first h-1 overflows are tolerated (scale kept); the h-th multiplies the scale by
//   backoff_factor. hysteresis = 1 (default) backs off at every overflow, as PyTorch does.
// The scale is a float32 updated as torch does it: float(double(scale) * factor).
// Static mode: the scale stays init_scale; overflowing steps are still skipped and counted.
// Disabled: scale() is 1 and update() never asks for a skip (GradScaler(enabled=False)).

#include <cstdint>
#include <optional>
#include <stdexcept>

#include "mpitrain/precision/all_finite.hpp"

namespace mpitrain {

struct LossScalerOptions {
  bool enabled = true;
  bool dynamic = true;                  // false: static scale init_scale
  double init_scale = 65536.0;          // 2^16, as torch
  double growth_factor = 2.0;           // > 1
  double backoff_factor = 0.5;          // in (0, 1)
  std::int64_t growth_interval = 2000;  // overflow-free steps before the scale grows, >= 1
  // Overflows tolerated before backing off, counting the one that backs off (DeepSpeed's
  // `hysteresis`, >= 1).
  std::int64_t hysteresis = 1;
  // true: the hysteresis budget refills after every overflow-free step, so only consecutive
  // overflows add up (Megatron/apex, and the usual meaning of "consecutive overflows");
  // false: it refills only when the scale grows (DeepSpeed's default).
  bool consecutive_hysteresis = true;
  // Smallest scale a backoff may reach (clamped to it, as DeepSpeed does); an overflow while
  // the scale already equals min_scale throws MinLossScaleError. 0 = no minimum (PyTorch).
  double min_scale = 0.0;
};

// Thrown by LossScaler::update when gradients overflow although the scale is at min_scale.
class MinLossScaleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LossScaler {
 public:
  // What a checkpoint stores (DESIGN.md section 5, group /scaler).
  struct State {
    double scale = 65536.0;
    std::int64_t growth_tracker = 0;
    std::int64_t hysteresis = 1;  // hysteresis_left()
    std::int64_t skipped_steps = 0;
    friend bool operator==(const State&, const State&) = default;
  };

  // Throws std::invalid_argument naming the option when an option is out of range.
  explicit LossScaler(const LossScalerOptions& options = {});

  // Returns the current scale (1 when disabled).
  float scale() const noexcept;
  bool enabled() const noexcept { return options_.enabled; }
  bool dynamic() const noexcept { return options_.dynamic; }
  const LossScalerOptions& options() const noexcept { return options_; }

  // Returns true when the step must be skipped (found_inf, and the scaler is enabled), after
  // updating the state as described above. `step` (the engine's optimizer step) is only
  // used in the message of MinLossScaleError; on that error the state is left unchanged.
  bool update(bool found_inf, std::optional<std::int64_t> step = std::nullopt);

  // Returns the number of steps update() asked to skip.
  std::int64_t skipped_steps() const noexcept { return skipped_steps_; }
  // Returns the number of consecutive overflow-free steps since the scale last changed
  // (or since the last overflow), as torch's `_growth_tracker`.
  std::int64_t growth_tracker() const noexcept { return growth_tracker_; }
  // Returns how many overflows, counting the one that backs off, it takes to reduce the
  // scale (1: the next overflow backs off).
  std::int64_t hysteresis_left() const noexcept { return hysteresis_left_; }

  // Returns the state to checkpoint.
  State state() const noexcept;
  // Restores a checkpointed state. Throws std::invalid_argument when the scale is not a
  // positive finite float32 or a counter is negative (hysteresis < 1). A hysteresis budget
  // larger than the configured one is cut to it. In static mode the configured scale is kept
  // and only skipped_steps is restored; a disabled scaler ignores the state.
  void load_state(const State& state);

 private:
  LossScalerOptions options_;
  float scale_;
  std::int64_t growth_tracker_ = 0;
  std::int64_t hysteresis_left_;
  std::int64_t skipped_steps_ = 0;
  std::int64_t updates_ = 0;  // update() calls on this object, named in error messages
};

}  // namespace mpitrain
