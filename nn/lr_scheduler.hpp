#pragma once
// LrScheduler: sets an optimizer's learning rate from a schedule sized by the run's total
// number of optimizer steps, as torch.optim.lr_scheduler.LambdaLR does with the multipliers
// of Hugging Face transformers' schedules:
//   constant: s < warmup ? s / max(1, warmup) : 1          (get_constant_schedule_with_warmup;
//                                                            warmup 0 = get_constant_schedule)
//   linear:   s < warmup ? s / max(1, warmup)
//                        : max(0, (total - s) / max(1, total - warmup))
//                                                           (get_linear_schedule_with_warmup)
//   cosine:   s < warmup ? s / max(1, warmup)
//                        : max(0, 0.5 (1 + cos(pi * 0.5 * 2 * p))),
//             p = (s - warmup) / max(1, total - warmup)     (get_cosine_schedule_with_warmup,
//                                                            num_cycles 0.5)
// The learning rate at step count s is base_lr * multiplier(s), evaluated in double in the
// same order as the Python formulas, so it equals torch's exactly. As in LambdaLR, the
// constructor already applies multiplier(0) (a warm-up starts from lr 0), and each step()
// advances the count by one and applies the new multiplier. Past total_steps the formulas
// continue unchanged: linear stays at 0, cosine rises again (as in transformers).

#include <cstdint>
#include <string>
#include <string_view>

#include "mpitrain/nn/optimizer.hpp"
#include "mpitrain/tensor/state_dict.hpp"

namespace mpitrain::nn {

enum class LrScheduleKind { constant, linear, cosine };

// Returns "constant", "linear" or "cosine".
std::string to_string(LrScheduleKind kind);
// Returns the kind named `name`; throws std::invalid_argument listing the valid names.
LrScheduleKind parse_lr_schedule_kind(std::string_view name);

class LrScheduler {
 public:
  // Takes the optimizer's current lr as base_lr and sets its lr to base_lr * multiplier(0).
  // Throws std::invalid_argument if warmup_steps or total_steps is negative. The optimizer
  // must outlive the scheduler.
  LrScheduler(Optimizer& optimizer, LrScheduleKind kind, std::int64_t warmup_steps,
              std::int64_t total_steps);

  // Advances the step count by one and sets the optimizer's lr to base_lr * multiplier(count).
  void step();

  // Returns the multiplier of base_lr at step count `step` (LambdaLR's lr_lambda).
  double multiplier(std::int64_t step) const noexcept;
  // Returns the lr this scheduler set last (what the optimizer's next step uses).
  double last_lr() const noexcept { return last_lr_; }
  // Returns the step count (LambdaLR's last_epoch): 0 after construction.
  std::int64_t last_step() const noexcept { return last_step_; }
  double base_lr() const noexcept { return base_lr_; }
  std::int64_t warmup_steps() const noexcept { return warmup_steps_; }
  std::int64_t total_steps() const noexcept { return total_steps_; }
  LrScheduleKind kind() const noexcept { return kind_; }

  // Returns scalars base_lr, last_step, warmup_steps, total_steps.
  StateDict state_dict() const;
  // Restores those four scalars (exactly these keys, no tensors) and sets the optimizer's lr
  // to base_lr * multiplier(last_step), as the saved run had it; the schedule kind is the
  // constructed one. Throws std::invalid_argument naming the key, changing nothing.
  void load_state_dict(const StateDict& state);

  // Resizes the schedule to `total_steps`, keeping the step count, and sets the optimizer's
  // lr to base_lr * multiplier(last_step) of the new size: for a resumed run whose length
  // changed (another global batch gives another number of steps per epoch), so that the
  // schedule still ends with the run. Throws std::invalid_argument if total_steps < 0.
  void set_total_steps(std::int64_t total_steps);

 private:
  Optimizer* optimizer_;
  LrScheduleKind kind_;
  double base_lr_;
  std::int64_t warmup_steps_;
  std::int64_t total_steps_;
  std::int64_t last_step_ = 0;
  double last_lr_ = 0.0;
};

// Returns a scheduler of the kind named `kind` ("constant", "linear", "cosine") for
// `optimizer`; throws std::invalid_argument listing the valid kinds if the name is unknown.
LrScheduler make_scheduler(std::string_view kind, Optimizer& optimizer,
                           std::int64_t warmup_steps, std::int64_t total_steps);

}  // namespace mpitrain::nn
