#include "mpitrain/engine/engine_phase.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace mpitrain {

void EnginePhase::open_micro_step(std::string_view who, bool loader_end) {
  if (micro_ != MicroStep::closed) illegal(who, "a micro-step is already open");
  micro_ = MicroStep::open;
  const bool window_full = window_ + 1 >= accumulation_steps_;
  sync_gradients_ = no_sync_depth_ == 0 && (window_full || loader_end);
}

bool EnginePhase::start_backward(std::string_view who, bool loader_end) {
  if (micro_ == MicroStep::backward_done) {
    illegal(who, "one backward per accumulate() micro-step (a second one would reduce gradients "
                 "that are already reduced)");
  }
  const bool implicit = micro_ == MicroStep::closed;
  if (implicit) open_micro_step(who, loader_end);
  micro_ = MicroStep::backward_done;
  return implicit;
}

void EnginePhase::close_micro_step() {
  micro_ = MicroStep::closed;
  window_ = sync_gradients_ ? 0 : window_ + 1;
}

void EnginePhase::backward_synchronised(std::string_view who) {
  if (micro_ != MicroStep::backward_done || !sync_gradients_) {
    illegal(who, "gradients synchronised outside a synchronising backward");
  }
  gradients_ = Gradients::synchronised;
  finite_ = true;
}

void EnginePhase::gradients_checked(std::string_view who, bool finite) {
  if (gradients_ == Gradients::local) illegal(who, "no synchronised gradients to check");
  gradients_ = Gradients::unscaled;
  finite_ = finite;
}

bool EnginePhase::take_step() noexcept {
  if (gradients_ == Gradients::local) return false;
  gradients_ = Gradients::local;
  return true;
}

void EnginePhase::restart_window() noexcept {
  window_ = 0;
  gradients_ = Gradients::local;
}

bool EnginePhase::at_step_boundary() const noexcept {
  if (step_pending()) return false;
  // Inside a micro-step that synchronised and already stepped, the state is that of the
  // step boundary (a save counts the open micro-step as done).
  if (micro_ != MicroStep::closed) return micro_ == MicroStep::backward_done && sync_gradients_;
  return window_ == 0;
}

std::string EnginePhase::describe() const {
  std::string gradients(to_string(gradients_));
  if (gradients_ == Gradients::unscaled) gradients += finite_ ? " (finite)" : " (inf/NaN)";
  if (step_pending()) gradients += ", step() pending";
  return fmt::format("micro-step {}, gradients {}, {} micro-step(s) accumulated{}",
                     to_string(micro_), gradients, accumulated_micro_steps(),
                     no_sync_depth_ > 0 ? ", inside no_sync()" : "");
}

void EnginePhase::illegal(std::string_view who, std::string_view why) const {
  throw std::logic_error(fmt::format("{}: {} (engine phase: {})", who, why, describe()));
}

std::string_view to_string(EnginePhase::MicroStep phase) noexcept {
  switch (phase) {
    case EnginePhase::MicroStep::closed: return "closed";
    case EnginePhase::MicroStep::open: return "open";
    case EnginePhase::MicroStep::backward_done: return "open, backward done";
  }
  return "?";
}

std::string_view to_string(EnginePhase::Gradients phase) noexcept {
  switch (phase) {
    case EnginePhase::Gradients::local: return "local";
    case EnginePhase::Gradients::synchronised: return "synchronised";
    case EnginePhase::Gradients::unscaled: return "unscaled";
  }
  return "?";
}

}  // namespace mpitrain
