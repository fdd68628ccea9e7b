#pragma once
// Progress: what rank 0 shows while training. On a terminal, one line redrawn in place
// (epoch, step/total, loss, samples/s, ETA); otherwise (batch jobs writing to files) a plain
// line every `log_every` steps, so logs stay readable. Under mpirun, "a terminal" means that
// mpirun's own stdout is one (every rank's stdout is a pseudo-terminal of Open MPI's).

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace mpitrain::app {

class Progress {
 public:
  // total_steps: optimizer steps of the whole run; out: where to draw (stdout).
  Progress(std::int64_t total_steps, std::int64_t log_every, std::FILE* out);

  // Called after every optimizer step with the latest values.
  void update(std::int64_t epoch, std::int64_t step, double loss, double samples_per_s);
  // Prints a line that must not be overwritten (evaluation results, checkpoint saved).
  void message(const char* text);
  // Ends the progress line.
  void finish();

  // Returns "1h02m03s" / "2m03s" / "3s".
  static void format_duration(double seconds, char* out, std::size_t size);

 private:
  std::int64_t total_;
  std::int64_t log_every_;
  std::FILE* out_;
  bool tty_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
  std::int64_t first_step_ = -1;
};

}  // namespace mpitrain::app
