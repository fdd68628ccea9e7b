#include "watchdog.hpp"

#include <fmt/format.h>

namespace mpitrain::app {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Watchdog::Watchdog(double timeout_s, int rank, std::function<void(const std::string&)> on_timeout,
                   std::function<bool()> waiting_for_peers)
    : timeout_s_(timeout_s),
      rank_(rank),
      on_timeout_(std::move(on_timeout)),
      waiting_for_peers_(std::move(waiting_for_peers)),
      since_ns_(now_ns()) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::progress(const char* what, long long detail) noexcept {
  what_.store(what, std::memory_order_relaxed);
  detail_.store(detail, std::memory_order_relaxed);
  since_ns_.store(now_ns(), std::memory_order_relaxed);
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return quit_; })) {
    const double stalled = static_cast<double>(now_ns() - since_ns_.load()) * 1e-9;
    if (stalled <= timeout_s_) continue;
    // Waiting for peers: the collective's deadline names the rank that did not arrive.
    if (waiting_for_peers_ && waiting_for_peers_()) continue;
    const long long detail = detail_.load();
    on_timeout_(fmt::format("rank {}: no progress for {:.0f} s (distributed.timeout_s = {:g}) in: {}{}", rank_,
                            stalled, timeout_s_, what_.load(), detail >= 0 ? fmt::format(" {}", detail) : ""));
    return;
  }
}

}  // namespace mpitrain::app
