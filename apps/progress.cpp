#include "progress.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace mpitrain::app {
namespace {

// Returns where the parent process's stdout leads ("/dev/pts/3"), or "" when /proc cannot tell.
std::string parent_stdout() {
  char link[256];
  const std::string parent = "/proc/" + std::to_string(::getppid()) + "/fd/1";
  const ssize_t n = ::readlink(parent.c_str(), link, sizeof link - 1);
  return n > 0 ? std::string(link, static_cast<std::size_t>(n)) : std::string();
}

bool is_terminal_path(const std::string& path) {
  return path.starts_with("/dev/pts/") || path.starts_with("/dev/tty") || path.starts_with("/dev/console");
}

// Returns true when `out` ends on a terminal. A terminal is not enough: Open MPI gives every
// rank's stdout a pseudo-terminal of its own and copies it to mpirun's stdout, which may be
// a file (a batch job) or a pipe. So for stdout the parent process's stdout is asked too
// (mpirun's, when it started this rank); where /proc cannot tell, the terminal wins.
bool ends_on_terminal(std::FILE* out) {
  const int fd = ::fileno(out);
  if (fd < 0 || ::isatty(fd) == 0) return false;
  if (fd != STDOUT_FILENO) return true;
  const std::string target = parent_stdout();
  return target.empty() || is_terminal_path(target);
}

// Returns a descriptor of the parent's terminal (mpirun's, whose width the user sees; Open
// MPI's per-rank pseudo-terminals have none), or -1 when the parent's stdout is none.
int open_parent_terminal() {
  const std::string target = parent_stdout();
  if (!is_terminal_path(target)) return -1;
  return ::open(target.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC);
}

// Returns the columns of the terminal behind `fd`, or 0 when it has no size.
int columns_of(int fd) {
  winsize size{};
  if (fd < 0 || ::ioctl(fd, TIOCGWINSZ, &size) != 0) return 0;
  return size.ws_col;
}

std::int64_t percent(std::int64_t done, std::int64_t total) { return total > 0 ? 100 * done / total : 100; }

}  // namespace

Progress::Progress(std::int64_t total_steps, std::int64_t log_every, Log& log, Display display, int columns)
    : total_(std::max<std::int64_t>(total_steps, 1)),
      log_every_(std::max<std::int64_t>(log_every, 1)),
      log_(log),
      out_(log.out()),
      tty_(display == Display::automatic ? ends_on_terminal(out_) : display == Display::terminal),
      fixed_columns_(columns) {
  if (tty_ && fixed_columns_ <= 0 && ::fileno(out_) == STDOUT_FILENO) terminal_fd_ = open_parent_terminal();
  log_.set_live_line(this);
}

Progress::~Progress() {
  log_.set_live_line(nullptr);
  if (drawn_) std::fputc('\n', out_);  // an exception ended the run: keep its last state
  std::fflush(out_);
  if (terminal_fd_ >= 0) ::close(terminal_fd_);
}

std::string Progress::format_duration(double seconds) {
  const auto s = static_cast<long>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string Progress::compose(std::string_view left, double fraction, std::string_view count,
                              std::initializer_list<std::string_view> fields, int columns) {
  constexpr std::size_t kMinBar = 10;
  const auto usable = static_cast<std::size_t>(std::max(columns - 1, 1));
  std::size_t used = left.size() + count.size() + kMinBar + 2;  // 2: the brackets
  const bool bar = used <= usable;
  if (!bar) used -= kMinBar + 2;
  std::string tail(count);
  for (std::string_view field : fields) {
    if (used + field.size() > usable) break;
    used += field.size();
    tail += field;
  }
  std::string line(left);
  if (bar) {
    const std::size_t width = kMinBar + (usable - used);
    const auto filled = static_cast<std::size_t>(static_cast<double>(width) * std::clamp(fraction, 0.0, 1.0));
    line.push_back('[');
    line.append(filled, '#');
    line.append(width - filled, '.');
    line.push_back(']');
  }
  line += tail;
  if (line.size() > usable) line.resize(usable);
  return line;
}

std::string Progress::format_rate(double per_second) {
  if (!(per_second < 999.5)) {
    if (per_second < 999.5e3) return fmt::format("{:.1f}k", per_second / 1e3);
    if (per_second < 999.5e6) return fmt::format("{:.2f}M", per_second / 1e6);
    return fmt::format("{:.2f}G", per_second / 1e9);
  }
  return fmt::format("{:.0f}", std::max(per_second, 0.0));
}

std::string Progress::training_line(int columns) const {
  const std::string eta = seconds_per_step_.has_value()
                              ? format_duration(seconds_per_step_.value() * static_cast<double>(total_ - step_))
                              : std::string("?");
  return compose(fmt::format("epoch {} ", epoch_), static_cast<double>(step_) / static_cast<double>(total_),
                 fmt::format(" {}/{}", step_, total_),
                 {fmt::format(" {:3}%", percent(step_, total_)), fmt::format(" ETA {}", eta),
                  fmt::format(" loss {:.4f}", loss_), fmt::format(" {} samples/s", format_rate(rate_.value()))},
                 columns);
}

std::string Progress::eval_line(int columns) const {
  const std::string eta =
      seconds_per_batch_.has_value()
          ? format_duration(seconds_per_batch_.value() * static_cast<double>(eval_total_ - eval_done_))
          : std::string("?");
  const double fraction =
      eval_total_ > 0 ? static_cast<double>(eval_done_) / static_cast<double>(eval_total_) : 1.0;
  return compose(fmt::format("eval epoch {} ", eval_epoch_), fraction, fmt::format(" {}/{} batches", eval_done_, eval_total_),
                 {fmt::format(" {:3}%", percent(eval_done_, eval_total_)), fmt::format(" ETA {}", eta)},
                 columns);
}

int Progress::columns() const {
  if (fixed_columns_ > 0) return fixed_columns_;
  int n = columns_of(terminal_fd_);
  if (n <= 0) n = columns_of(::fileno(out_));
  if (n <= 0) {
    const char* env = std::getenv("COLUMNS");
    n = env != nullptr ? std::atoi(env) : 0;
  }
  return n > 0 ? n : 80;
}

void Progress::draw(bool force) {
  if (!tty_) return;
  const auto now = Clock::now();
  // Redraw at most ten times a second: drawing must not cost training time.
  if (!force && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const int width = columns();
  const std::string line = in_eval_ ? eval_line(width) : training_line(width);
  fmt::print(out_, "\r{}\033[K", line);
  std::fflush(out_);
  drawn_ = true;
}

void Progress::update(std::int64_t epoch, std::int64_t step, double loss, double samples_per_s) {
  const auto now = Clock::now();
  if (last_step_ >= 0 && step > last_step_) {
    // A resumed run estimates from the steps it did itself.
    seconds_per_step_.add(std::chrono::duration<double>(now - last_step_time_).count() /
                          static_cast<double>(step - last_step_));
  }
  last_step_ = step;
  last_step_time_ = now;
  epoch_ = epoch;
  step_ = step;
  loss_ = loss;
  rate_.add(samples_per_s);
  if (tty_) {
    draw(step == total_);
  } else if (step % log_every_ == 0 || step == total_) {
    const std::string eta = format_duration(seconds_per_step_.value() * static_cast<double>(total_ - step));
    fmt::print(out_, "epoch {} step {}/{} loss {:.4f} samples/s {:.0f} eta {}\n", epoch, step, total_, loss,
               rate_.value(), eta);
    std::fflush(out_);
  }
}

void Progress::begin_eval(std::int64_t epoch, std::int64_t batches) {
  in_eval_ = true;
  eval_epoch_ = epoch;
  eval_done_ = 0;
  eval_total_ = batches;
  last_batch_time_ = Clock::now();
  draw(true);
}

void Progress::update_eval(std::int64_t batches_done) {
  const auto now = Clock::now();
  if (batches_done > eval_done_) {
    seconds_per_batch_.add(std::chrono::duration<double>(now - last_batch_time_).count() /
                           static_cast<double>(batches_done - eval_done_));
  }
  last_batch_time_ = now;
  eval_done_ = batches_done;
  draw(batches_done == eval_total_);
}

void Progress::end_eval() {
  in_eval_ = false;
  if (drawn_) draw(true);
}

void Progress::finish() {
  if (drawn_) {
    draw(true);
    std::fputc('\n', out_);
  }
  drawn_ = false;
  tty_ = false;  // nothing more is drawn: later messages are plain lines
  std::fflush(out_);
}

void Progress::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
}

void Progress::redraw() {
  if (drawn_) draw(true);
}

}  // namespace mpitrain::app
