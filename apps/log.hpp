#pragma once
// Log: the one place the trainer's messages go through (DESIGN.md section 6). Each line
// starts with the rank ("[rank 1] "); error and warn lines go to the error stream, info and
// debug lines to the output stream, and MPITRAIN_LOG_LEVEL (error | warn | info | debug,
// default info) says which levels are shown. A line redrawn in place (the progress bar, a
// LiveLine) is cleared before every message and redrawn after it, so a message never lands
// in the middle of the bar and the bar never shows a state older than the message.

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

namespace mpitrain::app {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// Returns the level `text` names (MPITRAIN_LOG_LEVEL's value; null or empty: info). Throws
// std::invalid_argument naming the variable, the value and the four names.
LogLevel parse_log_level(const char* text);

// A line on a terminal that is redrawn in place.
class LiveLine {
 public:
  virtual ~LiveLine() = default;
  // Erases the line if it is drawn, so that a message can take its place.
  virtual void clear() = 0;
  // Draws the line again (its current state) after a message.
  virtual void redraw() = 0;
};

class Log {
 public:
  // rank: this process's rank (the prefix); out: info and debug; err: error and warn.
  Log(int rank, LogLevel level, std::FILE* out, std::FILE* err);

  // Returns true when lines of `level` are shown.
  bool enabled(LogLevel level) const { return level <= level_; }
  // Writes "[rank R] text" (warn: "[rank R] warning: text") and a newline, if shown.
  void write(LogLevel level, std::string_view text);

  template <class... Args>
  void error(fmt::format_string<Args...> f, Args&&... args) { write(LogLevel::error, fmt::format(f, std::forward<Args>(args)...)); }
  template <class... Args>
  void warn(fmt::format_string<Args...> f, Args&&... args) { write(LogLevel::warn, fmt::format(f, std::forward<Args>(args)...)); }
  template <class... Args>
  void info(fmt::format_string<Args...> f, Args&&... args) { write(LogLevel::info, fmt::format(f, std::forward<Args>(args)...)); }
  template <class... Args>
  void debug(fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(LogLevel::debug)) write(LogLevel::debug, fmt::format(f, std::forward<Args>(args)...));
  }

  // Writes an error line from a thread other than the one that draws the live line (the
  // watchdog's): it starts with a newline instead of touching the live line, so it never
  // lands inside the bar and never races with its drawing.
  void alert(std::string_view text);

  // The line to clear before each message and redraw after it (nullptr: none). The
  // LiveLine detaches itself before it is destroyed.
  void set_live_line(LiveLine* line) { live_ = line; }
  std::FILE* out() const { return out_; }
  int rank() const { return rank_; }

 private:
  int rank_;
  LogLevel level_;
  std::FILE* out_;
  std::FILE* err_;
  LiveLine* live_ = nullptr;
};

}  // namespace mpitrain::app
