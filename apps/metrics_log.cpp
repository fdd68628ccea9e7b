#include "metrics_log.hpp"

#include <nlohmann/json.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <random>
#include <stdexcept>

namespace mpitrain::app {
namespace {

// Returns x, or null for NaN/inf (JSON has no NaN; a missing measurement is null).
nlohmann::json number(double x) {
  if (std::isfinite(x)) return x;
  return nullptr;
}

// Returns the seconds since the Unix epoch, to the microsecond.
double wall_time() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(now).count()) * 1e-6;
}

}  // namespace

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(now));
}

std::string new_run_id() {
  std::random_device random;
  const std::time_t now = std::time(nullptr);
  return fmt::format("{:%Y%m%dT%H%M%SZ}-{:08x}", fmt::gmtime(now), random());
}

MetricsLog::MetricsLog(const std::string& path) : path_(path), out_(path, std::ios::app) {
  if (!out_) {
    throw std::runtime_error("cannot open metrics file " + path + ": " + std::strerror(errno));
  }
}

void MetricsLog::write(const TrainMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["loss"] = number(m.loss);
  j["lr"] = number(m.lr);
  j["grad_norm"] = number(m.grad_norm);
  j["loss_scale"] = number(m.loss_scale);
  j["skipped_steps"] = m.skipped_steps;
  j["samples_per_s"] = number(m.samples_per_s);
  j["time_s"] = number(m.time_s);
  j["wall_time"] = wall_time();
  write_line(j.dump());
}

void MetricsLog::write(const EvalMetrics& m) {
  nlohmann::ordered_json j;
  j["eval"] = true;
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["loss"] = number(m.loss);
  j[m.metric_name] = number(m.accuracy);
  j["samples"] = m.samples;
  j["wall_time"] = wall_time();
  write_line(j.dump());
}

void MetricsLog::write(const RunHeader& h) {
  nlohmann::ordered_json j;
  j["header"] = true;
  j["run_id"] = h.run_id;
  j["start_time"] = h.start_time;
  j["mpitrain_version"] = h.mpitrain_version;
  j["world_size"] = h.world_size;
  j["config_hash"] = h.config_hash;
  j["wall_time"] = wall_time();
  write_line(j.dump());
}

void MetricsLog::write(const ResumeMarker& m) {
  nlohmann::ordered_json j;
  j["resumed"] = true;
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["checkpoint"] = m.checkpoint;
  j["wall_time"] = wall_time();
  write_line(j.dump());
}

void MetricsLog::write_line(const std::string& line) {
  out_ << line << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write metrics file " + path_);
}

}  // namespace mpitrain::app
