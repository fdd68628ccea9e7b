#include "metrics_log.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace mpitrain::app {
namespace {

// Returns x, or null for NaN/inf (JSON has no NaN; a missing measurement is null).
nlohmann::json number(double x) {
  if (std::isfinite(x)) return x;
  return nullptr;
}

}  // namespace

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
  write_line(j.dump());
}

void MetricsLog::write(const EvalMetrics& m) {
  nlohmann::ordered_json j;
  j["eval"] = true;
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["loss"] = number(m.loss);
  j["accuracy"] = number(m.accuracy);
  j["samples"] = m.samples;
  write_line(j.dump());
}

void MetricsLog::write_line(const std::string& line) {
  out_ << line << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write metrics file " + path_);
}

}  // namespace mpitrain::app
