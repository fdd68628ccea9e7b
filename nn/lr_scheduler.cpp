// Learning-rate schedules. Cost: O(1) per step() (one cos for the cosine schedule).

#include "mpitrain/nn/lr_scheduler.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace mpitrain::nn {
namespace {

constexpr std::array<std::pair<std::string_view, LrScheduleKind>, 3> kKinds = {{
    {"constant", LrScheduleKind::constant},
    {"linear", LrScheduleKind::linear},
    {"cosine", LrScheduleKind::cosine},
}};

constexpr std::array<std::string_view, 4> kStateKeys = {"base_lr", "last_step", "warmup_steps",
                                                        "total_steps"};

// transformers' cosine schedule with its default number of cycles (half a cosine period).
constexpr double kNumCycles = 0.5;

std::string valid_kinds() {
  std::string s;
  for (const auto& [name, kind] : kKinds) {
    if (!s.empty()) s += ", ";
    s += name;
  }
  return s;
}

void check_steps(std::int64_t warmup_steps, std::int64_t total_steps, std::string_view who) {
  if (warmup_steps < 0 || total_steps < 0) {
    throw std::invalid_argument(std::string(who) + ": warmup_steps (" +
                                std::to_string(warmup_steps) + ") and total_steps (" +
                                std::to_string(total_steps) + ") must be >= 0");
  }
}

// Returns state.scalars[key] as a count (an integer in [0, 2^53]); throws naming the key.
std::int64_t count_at(const StateDict& state, std::string_view key) {
  const double v = state.scalars.at(std::string(key));
  if (!(v >= 0.0 && v <= 9007199254740992.0) || std::trunc(v) != v) {
    throw std::invalid_argument("LrScheduler::load_state_dict: scalar '" + std::string(key) +
                                "' = " + std::to_string(v) + " is not a count (an integer >= 0)");
  }
  return static_cast<std::int64_t>(v);
}

}  // namespace

std::string to_string(LrScheduleKind kind) {
  for (const auto& [name, k] : kKinds) {
    if (k == kind) return std::string(name);
  }
  throw std::invalid_argument("to_string: invalid LrScheduleKind " +
                              std::to_string(static_cast<int>(kind)));
}

LrScheduleKind parse_lr_schedule_kind(std::string_view name) {
  for (const auto& [n, kind] : kKinds) {
    if (n == name) return kind;
  }
  throw std::invalid_argument("unknown scheduler kind '" + std::string(name) +
                              "' (valid: " + valid_kinds() + ")");
}

LrScheduler::LrScheduler(Optimizer& optimizer, LrScheduleKind kind, std::int64_t warmup_steps,
                         std::int64_t total_steps)
    : optimizer_(&optimizer),
      kind_(kind),
      base_lr_(optimizer.lr()),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps) {
  check_steps(warmup_steps, total_steps, "LrScheduler");
  last_lr_ = base_lr_ * multiplier(0);
  optimizer_->set_lr(last_lr_);
}

void LrScheduler::step() {
  ++last_step_;
  last_lr_ = base_lr_ * multiplier(last_step_);
  optimizer_->set_lr(last_lr_);
}

double LrScheduler::multiplier(std::int64_t step) const noexcept {
  // Written in the order of the Python formulas, so the doubles match exactly.
  if (step < warmup_steps_) {
    return static_cast<double>(step) /
           static_cast<double>(std::max<std::int64_t>(1, warmup_steps_));
  }
  const double after_warmup =
      static_cast<double>(std::max<std::int64_t>(1, total_steps_ - warmup_steps_));
  switch (kind_) {
    case LrScheduleKind::constant:
      return 1.0;
    case LrScheduleKind::linear:
      return std::max(0.0, static_cast<double>(total_steps_ - step) / after_warmup);
    case LrScheduleKind::cosine: {
      const double progress = static_cast<double>(step - warmup_steps_) / after_warmup;
      return std::max(
          0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * kNumCycles * 2.0 * progress)));
    }
  }
  return 1.0;
}

StateDict LrScheduler::state_dict() const {
  StateDict out;
  out.scalars = {{"base_lr", base_lr_},
                 {"last_step", static_cast<double>(last_step_)},
                 {"warmup_steps", static_cast<double>(warmup_steps_)},
                 {"total_steps", static_cast<double>(total_steps_)}};
  return out;
}

void LrScheduler::load_state_dict(const StateDict& state) {
  const std::string who = "LrScheduler::load_state_dict: ";
  if (!state.tensors.empty()) {
    const auto& [key, tensor] = *state.tensors.begin();
    throw std::invalid_argument(who + "unexpected tensor key '" + key + "' (shape " +
                                mpitrain::to_string(tensor.shape()) +
                                "; a scheduler has only scalars)");
  }
  for (std::string_view key : kStateKeys) {
    if (!state.scalars.contains(std::string(key))) {
      throw std::invalid_argument(who + "missing scalar key '" + std::string(key) + "'");
    }
  }
  for (const auto& [key, value] : state.scalars) {
    if (std::find(kStateKeys.begin(), kStateKeys.end(), key) == kStateKeys.end()) {
      throw std::invalid_argument(who + "unexpected scalar key '" + key + "'");
    }
  }
  const double base_lr = state.scalars.at("base_lr");
  if (!(base_lr >= 0.0) || !std::isfinite(base_lr)) {
    throw std::invalid_argument(who + "scalar 'base_lr' = " + std::to_string(base_lr) +
                                " is not a learning rate (finite, >= 0)");
  }
  const std::int64_t last_step = count_at(state, "last_step");
  const std::int64_t warmup_steps = count_at(state, "warmup_steps");
  const std::int64_t total_steps = count_at(state, "total_steps");

  // Nothing below throws: the lr is finite and >= 0 since base_lr and the multiplier are.
  base_lr_ = base_lr;
  last_step_ = last_step;
  warmup_steps_ = warmup_steps;
  total_steps_ = total_steps;
  last_lr_ = base_lr_ * multiplier(last_step_);
  optimizer_->set_lr(last_lr_);
}

void LrScheduler::set_total_steps(std::int64_t total_steps) {
  check_steps(warmup_steps_, total_steps, "LrScheduler::set_total_steps");
  total_steps_ = total_steps;
  last_lr_ = base_lr_ * multiplier(last_step_);
  optimizer_->set_lr(last_lr_);
}

LrScheduler make_scheduler(std::string_view kind, Optimizer& optimizer,
                           std::int64_t warmup_steps, std::int64_t total_steps) {
  return LrScheduler(optimizer, parse_lr_schedule_kind(kind), warmup_steps, total_steps);
}

}  // namespace mpitrain::nn
