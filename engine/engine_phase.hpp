#pragma once
// EnginePhase: where the Engine stands in its training step, as two small state machines
// and the two counters they need, instead of flags a reader combines in their head.
//
// The micro-step (MicroStep), one backward pass:
//
//   closed --open_micro_step()--> open --start_backward()--> backward_done
//      ^                                                          |
//      +---------------------- close_micro_step() ----------------+ (also from open)
//
//   open_micro_step() decides sync_gradients() for the micro-step: it synchronises when it
//   is the accumulation_steps-th since the last synchronisation or `loader_end` (the batch
//   was the epoch's last, with sync_with_dataloader), and never inside a no_sync() guard
//   (enter_no_sync() / leave_no_sync() nest). start_backward() on a closed micro-step opens
//   one itself (a backward without accumulate()) and says so; the caller closes it after
//   the backward. close_micro_step() restarts the window after a synchronising micro-step.
//
// The optimizer step (Gradients), what the gradients in the buckets are:
//
//   local --backward_synchronised()--> synchronised --gradients_checked()--> unscaled
//     ^                                     |                                   |
//     +------------ take_step() ------------+-----------------------------------+
//
//   local         nothing waits for step(): the gradients of window() micro-steps (maybe
//                 none) are accumulated locally, not synchronised.
//   synchronised  a synchronising backward ran: every rank holds the same gradients, the
//                 loss scale still in them; step() is pending.
//   unscaled      the same, with the loss scale removed and inf/NaN checked (unscale_and_check
//                 or clip_grad_norm); finite() says what the check found.
//   take_step() is the only way back to local, apart from restart_window() (prepare,
//   load_state, restore_counters: a checkpoint is taken between optimizer steps).
//
// The step boundary (at_step_boundary(): save_state() allowed) is: no micro-step open,
// gradients local and nothing accumulated; or, inside an open micro-step, its synchronising
// backward ran and step() was called (a training loop saving from inside accumulate()).
//
// Illegal calls throw std::logic_error naming the caller and the current phase (describe()).

#include <cstddef>
#include <string>
#include <string_view>

namespace mpitrain {

class EnginePhase {
 public:
  enum class MicroStep { closed, open, backward_done };
  enum class Gradients { local, synchronised, unscaled };

  // `accumulation_steps`: micro-steps per synchronisation (>= 1).
  explicit EnginePhase(std::size_t accumulation_steps) noexcept
      : accumulation_steps_(accumulation_steps) {}

  // ---- transitions -----------------------------------------------------------------------------
  // closed -> open; decides sync_gradients(). Throws when a micro-step is already open.
  void open_micro_step(std::string_view who, bool loader_end);
  // open -> backward_done, or closed -> backward_done (opening the micro-step, with
  // `loader_end` as open_micro_step's). Returns true when it opened the micro-step itself.
  // Throws when the open micro-step already ran its backward.
  bool start_backward(std::string_view who, bool loader_end);
  // open/backward_done -> closed; advances or restarts the accumulation window.
  void close_micro_step();
  void enter_no_sync() noexcept { ++no_sync_depth_; }
  void leave_no_sync() noexcept { --no_sync_depth_; }
  // any -> synchronised (a synchronising backward finished). Throws unless the micro-step
  // ran its backward and synchronises.
  void backward_synchronised(std::string_view who);
  // synchronised/unscaled -> unscaled with the result of the inf/NaN check. Throws when no
  // step is pending.
  void gradients_checked(std::string_view who, bool finite);
  // synchronised/unscaled -> local. Returns false (and changes nothing) when no step is
  // pending, as step() after a non-synchronising micro-step does nothing.
  bool take_step() noexcept;
  // Records whether the step just taken skipped the optimizer.
  void record_step(bool skipped) noexcept { last_step_skipped_ = skipped; }
  // -> local with an empty window; the micro-step phase is kept.
  void restart_window() noexcept;

  // ---- queries ---------------------------------------------------------------------------------
  MicroStep micro_step() const noexcept { return micro_; }
  Gradients gradients() const noexcept { return gradients_; }
  bool micro_step_open() const noexcept { return micro_ != MicroStep::closed; }
  // Returns true when the open micro-step ran its backward (it counts as done in a save).
  bool open_micro_step_done() const noexcept { return micro_ == MicroStep::backward_done; }
  // Returns true when the current (or last) micro-step synchronises gradients.
  bool sync_gradients() const noexcept { return sync_gradients_; }
  bool step_pending() const noexcept { return gradients_ != Gradients::local; }
  bool unscaled() const noexcept { return gradients_ == Gradients::unscaled; }
  // Returns the result of the last inf/NaN check (meaningful when unscaled()).
  bool finite() const noexcept { return finite_; }
  bool last_step_skipped() const noexcept { return last_step_skipped_; }
  // Returns the micro-steps since the last synchronisation, the open one not included.
  std::size_t window() const noexcept { return window_; }
  // Returns the micro-steps whose gradients are accumulated and not yet stepped.
  std::size_t accumulated_micro_steps() const noexcept {
    return window_ + (micro_ == MicroStep::backward_done ? 1 : 0);
  }
  bool at_step_boundary() const noexcept;
  // Returns the phase in words, e.g. "micro-step open, gradients synchronised (step()
  // pending), 1 micro-step(s) in the window", for error messages.
  std::string describe() const;

 private:
  [[noreturn]] void illegal(std::string_view who, std::string_view why) const;

  std::size_t accumulation_steps_;
  MicroStep micro_ = MicroStep::closed;
  Gradients gradients_ = Gradients::local;
  std::size_t window_ = 0;    // micro-steps since the last synchronisation
  int no_sync_depth_ = 0;     // live no_sync() guards
  bool sync_gradients_ = true;
  bool finite_ = true;
  bool last_step_skipped_ = false;
};

std::string_view to_string(EnginePhase::MicroStep phase) noexcept;
std::string_view to_string(EnginePhase::Gradients phase) noexcept;

}  // namespace mpitrain
