#pragma once
// MetricsLog: <project.dir>/metrics.jsonl, one JSON object per line (DESIGN.md section 7),
// appended and flushed line by line so a killed run keeps every line it wrote. Rank 0 only.
// Each run starts with a header line; a resumed run adds a resume marker after it; every
// line carries "wall_time" (seconds since the Unix epoch, as TensorBoard's wall_time).

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
  double accuracy = 0;      // in [0, 1]; or the objective's metric, named metric_name
  std::int64_t samples = 0; // exactly the test set size
  std::string metric_name = "accuracy";  // the key of `accuracy` in the line
};

// The first line of each run.
struct RunHeader {
  std::string run_id;            // unique per run: start time and random bits
  std::string start_time;        // ISO 8601, UTC: "2026-11-24T23:55:20Z"
  std::string mpitrain_version;
  std::int64_t world_size = 0;
  std::string config_hash;       // XXH3-128 (hex) of the effective config YAML
};

// Where a resumed run continues: lines of earlier runs with a larger step are superseded
// (readers drop them).
struct ResumeMarker {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::string checkpoint;        // the folder resumed from; "" when there was none
};

// Returns a new run id: "20261124T235520Z-1a2b3c4d" (UTC start time, 32 random bits).
std::string new_run_id();
// Returns the current time as ISO 8601 UTC, to the second.
std::string utc_now_iso8601();

class MetricsLog {
 public:
  // Opens `path` for appending (a resumed run continues the same file); throws
  // std::runtime_error naming the path when it cannot.
  explicit MetricsLog(const std::string& path);
  void write(const TrainMetrics& m);
  void write(const EvalMetrics& m);
  void write(const RunHeader& h);
  void write(const ResumeMarker& m);

 private:
  void write_line(const std::string& line);
  std::string path_;
  std::ofstream out_;
};

}  // namespace mpitrain::app
