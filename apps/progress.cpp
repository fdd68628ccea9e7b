#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <string>

namespace mpitrain::app {
namespace {

// Returns true when `out` ends on a terminal. A terminal is not enough: Open MPI gives every
// rank's stdout a pseudo-terminal of its own and copies it to mpirun's stdout, which may be
// a file (a batch job) or a pipe. So for stdout the parent process's stdout is asked too
// (mpirun's, when it started this rank); where /proc cannot tell, the terminal wins.
bool ends_on_terminal(std::FILE* out) {
  const int fd = ::fileno(out);
  if (fd < 0 || ::isatty(fd) == 0) return false;
  if (fd != STDOUT_FILENO) return true;
  char link[256];
  const std::string parent = "/proc/" + std::to_string(::getppid()) + "/fd/1";
  const ssize_t n = ::readlink(parent.c_str(), link, sizeof link - 1);
  if (n <= 0) return true;
  const std::string target(link, static_cast<std::size_t>(n));
  return target.rfind("/dev/pts/", 0) == 0 || target.rfind("/dev/tty", 0) == 0 ||
         target.rfind("/dev/console", 0) == 0;
}

}  // namespace

Progress::Progress(std::int64_t total_steps, std::int64_t log_every, std::FILE* out)
    : total_(std::max<std::int64_t>(total_steps, 1)),
      log_every_(std::max<std::int64_t>(log_every, 1)),
      out_(out),
      tty_(ends_on_terminal(out)) {}

void Progress::format_duration(double seconds, char* out, std::size_t size) {
  const auto s = static_cast<long>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) {
    std::snprintf(out, size, "%ldh%02ldm%02lds", s / 3600, (s / 60) % 60, s % 60);
  } else if (s >= 60) {
    std::snprintf(out, size, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(out, size, "%lds", s);
  }
}

void Progress::update(std::int64_t epoch, std::int64_t step, double loss, double samples_per_s) {
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = step - 1;  // a resumed run estimates from the steps it did itself
    start_ = now;
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const std::int64_t done = step - first_step_;
  const double eta = done > 0 ? elapsed / static_cast<double>(done) *
                                    static_cast<double>(std::max<std::int64_t>(total_ - step, 0))
                              : 0.0;
  char eta_text[32];
  format_duration(eta, eta_text, sizeof eta_text);
  if (tty_) {
    // Redraw at most ten times a second: drawing must not cost training time.
    if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 24;
    const int filled = static_cast<int>(static_cast<double>(width) * static_cast<double>(step) /
                                        static_cast<double>(total_));
    char bar[width + 1];
    for (int i = 0; i < width; ++i) bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    std::fprintf(out_, "\r\033[Kepoch %lld [%s] %lld/%lld  loss %.4f  %.0f samples/s  ETA %s",
                 static_cast<long long>(epoch), bar, static_cast<long long>(step),
                 static_cast<long long>(total_), loss, samples_per_s, eta_text);
    line_open_ = true;
  } else if (step % log_every_ == 0 || step == total_) {
    std::fprintf(out_, "epoch %lld step %lld/%lld loss %.4f samples/s %.0f eta %s\n",
                 static_cast<long long>(epoch), static_cast<long long>(step),
                 static_cast<long long>(total_), loss, samples_per_s, eta_text);
  }
  std::fflush(out_);
}

void Progress::message(const char* text) {
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
  std::fprintf(out_, "%s\n", text);
  std::fflush(out_);
}

void Progress::finish() {
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace mpitrain::app
