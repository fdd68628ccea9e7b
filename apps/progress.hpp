#pragma once
// Progress: what rank 0 shows while training, in the spirit of tqdm.
//
// On a terminal: one line redrawn in place ("\r", the text, erase to the end of the line),
// at most ten times a second. The line is cut to the terminal's width - 1 columns, read at
// every redraw (so a resized terminal is followed without a signal handler), so it never
// wraps. During evaluation the same line shows the evaluation's batches. Rates and the ETA
// are exponential moving averages (weight 0.3 for the newest interval, tqdm's smoothing).
// The Progress is the Log's LiveLine: every message clears the line first and redraws it
// after, and finish() draws the final state and ends the line.
//
// Otherwise (batch jobs writing to files): a plain line every `log_every` steps and at the
// last step, so logs stay readable; nothing during evaluation.
//
// Under mpirun, "a terminal" means that mpirun's own stdout is one (every rank's stdout is
// a pseudo-terminal of Open MPI's); its width is then read from mpirun's terminal.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>

#include "log.hpp"

namespace mpitrain::app {

// An exponential moving average: value = alpha * x + (1 - alpha) * value (the first x as is).
class Smoothed {
 public:
  explicit Smoothed(double alpha = 0.3) : alpha_(alpha) {}
  void add(double x) {
    value_ = has_ ? alpha_ * x + (1.0 - alpha_) * value_ : x;
    has_ = true;
  }
  bool has_value() const { return has_; }
  double value() const { return value_; }

 private:
  double alpha_;
  double value_ = 0.0;
  bool has_ = false;
};

class Progress final : public LiveLine {
 public:
  enum class Display { automatic, terminal, plain };

  // total_steps: optimizer steps of the whole run. The Progress draws on log.out() and
  // attaches itself to `log` until it is destroyed. `columns` > 0 fixes the width (tests);
  // 0 asks the terminal at each redraw.
  Progress(std::int64_t total_steps, std::int64_t log_every, Log& log,
           Display display = Display::automatic, int columns = 0);
  ~Progress() override;
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Called after every optimizer step with the latest values.
  void update(std::int64_t epoch, std::int64_t step, double loss, double samples_per_s);
  // Evaluation after `epoch`: `batches` of this rank, then one call per batch done.
  void begin_eval(std::int64_t epoch, std::int64_t batches);
  void update_eval(std::int64_t batches_done);
  // Back to the training line (drawn at once, so it never shows the evaluation's count).
  void end_eval();
  // Draws the final state and ends the line; later messages start on a fresh line.
  void finish();

  void clear() override;
  void redraw() override;

  // Returns "1h02m03s" / "2m03s" / "3s".
  static std::string format_duration(double seconds);
  // Returns the line: `left`, a bar of '#' and '.' in brackets, `count`, then as many of
  // `fields` (most important first) as leave the bar 10 characters, the bar filling the rest
  // of `columns` - 1. When not even `left`, a bar of 10 and `count` fit, there is no bar,
  // and the line is cut to `columns` - 1 characters. So the line never wraps.
  static std::string compose(std::string_view left, double fraction, std::string_view count,
                             std::initializer_list<std::string_view> fields, int columns);
  // Returns 950, 99.8k, 1.15M: a rate with an SI prefix, as tqdm's unit_scale.
  static std::string format_rate(double per_second);

 private:
  using Clock = std::chrono::steady_clock;
  std::string training_line(int columns) const;
  std::string eval_line(int columns) const;
  int columns() const;
  void draw(bool force);

  std::int64_t total_;
  std::int64_t log_every_;
  Log& log_;
  std::FILE* out_;
  bool tty_;
  int fixed_columns_;
  int terminal_fd_ = -1;  // mpirun's terminal (its stdout), opened for its width; -1: ours
  bool drawn_ = false;    // the live line is on screen
  Clock::time_point last_draw_{};
  // Training.
  std::int64_t epoch_ = 0, step_ = 0;
  double loss_ = 0.0;
  Smoothed rate_;              // samples/s, every rank's
  Smoothed seconds_per_step_;  // for the ETA
  std::int64_t last_step_ = -1;
  Clock::time_point last_step_time_{};
  // Evaluation.
  bool in_eval_ = false;
  std::int64_t eval_epoch_ = 0, eval_done_ = 0, eval_total_ = 0;
  Smoothed seconds_per_batch_;
  Clock::time_point last_batch_time_{};
};

}  // namespace mpitrain::app
