#pragma once
// MetricsLog: <project.dir>/metrics.jsonl, one JSON object per line (DESIGN.md section 7),
// appended and flushed line by line so a killed run keeps every line it wrote. Rank 0 only.

#include <cstdint>
#include <fstream>
#include <string>

namespace mpitrain::app {

struct TrainMetrics {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double loss = 0;          // mean over the micro-batches and ranks since the previous line
  double lr = 0;
  double grad_norm = 0;     // global L2 norm before clipping (NaN when not measured)
  double loss_scale = 1;
  std::int64_t skipped_steps = 0;
  double samples_per_s = 0; // all ranks' samples
  double time_s = 0;        // since the start of training
};

struct EvalMetrics {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double loss = 0;
  double accuracy = 0;      // in [0, 1]
  std::int64_t samples = 0; // exactly the test set size
};

class MetricsLog {
 public:
  // Opens `path` for appending (a resumed run continues the same file); throws
  // std::runtime_error naming the path when it cannot.
  explicit MetricsLog(const std::string& path);
  void write(const TrainMetrics& m);
  void write(const EvalMetrics& m);

 private:
  void write_line(const std::string& line);
  std::string path_;
  std::ofstream out_;
};

}  // namespace mpitrain::app
