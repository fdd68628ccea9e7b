#include "log.hpp"

#include <stdexcept>

namespace mpitrain::app {

LogLevel parse_log_level(const char* text) {
  const std::string_view name = text == nullptr ? "" : text;
  if (name.empty() || name == "info") return LogLevel::info;
  if (name == "error") return LogLevel::error;
  if (name == "warn") return LogLevel::warn;
  if (name == "debug") return LogLevel::debug;
  throw std::invalid_argument(
      fmt::format("MPITRAIN_LOG_LEVEL: expected one of error, warn, info, debug, got '{}'", name));
}

Log::Log(int rank, LogLevel level, std::FILE* out, std::FILE* err)
    : rank_(rank), level_(level), out_(out), err_(err) {}

void Log::write(LogLevel level, std::string_view text) {
  if (!enabled(level)) return;
  std::FILE* stream = level <= LogLevel::warn ? err_ : out_;
  if (live_ != nullptr) live_->clear();
  fmt::print(stream, "[rank {}] {}{}\n", rank_, level == LogLevel::warn ? "warning: " : "", text);
  std::fflush(stream);
  if (live_ != nullptr) live_->redraw();
}

void Log::alert(std::string_view text) {
  fmt::print(err_, "\n[rank {}] {}\n", rank_, text);
  std::fflush(err_);
}

}  // namespace mpitrain::app
