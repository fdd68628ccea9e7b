#include "memory_budget.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <limits>
#include <sstream>

namespace mpitrain::app {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kFloatBytes = 4;

// Returns a * b, or UINT64_MAX when that overflows.
std::uint64_t mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? kMax : out;
}
// Returns a + b, or UINT64_MAX when that overflows.
std::uint64_t add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kMax : out;
}

// Returns "1234 bytes (1.2 GiB)".
std::string bytes_text(std::uint64_t bytes) {
  return fmt::format("{} bytes ({:.1f} GiB)", bytes, static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

MemoryNeed memory_need(const TrainConfig& config, std::size_t features, std::size_t classes, int ranks) {
  MemoryNeed need;
  std::uint64_t in = features, hidden_sum = 0;
  for (const std::int64_t width : config.model.mlp.hidden) {
    const auto out = static_cast<std::uint64_t>(width);
    need.parameters = add(need.parameters, add(mul(in, out), out));
    hidden_sum = add(hidden_sum, out);
    in = out;
  }
  need.parameters = add(need.parameters, add(mul(in, classes), classes));
  std::uint64_t copies = 3;  // weights, gradients, gradient buckets
  if (config.optimizer.kind == "adamw") copies += 2;
  if (config.optimizer.kind == "sgd" && config.optimizer.momentum > 0.0) copies += 1;
  need.model_bytes = mul(mul(need.parameters, kFloatBytes), copies);
  std::uint64_t batch = static_cast<std::uint64_t>(config.data.batch_size);
  if (config.data.split_batches) batch /= static_cast<std::uint64_t>(ranks);
  const std::uint64_t per_example = add(add(features, 1), mul(3, add(hidden_sum, classes)));
  need.batch_bytes = mul(mul(batch, per_example), kFloatBytes);
  return need;
}

std::uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return mul(kib, 1024);
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return kMax;  // unknown: do not refuse
  return mul(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page_size));
}

void check_memory(const TrainConfig& config, const MemoryNeed& need, int ranks_on_node, std::uint64_t available) {
  const std::uint64_t per_rank = add(need.model_bytes, need.batch_bytes);
  const std::uint64_t total = mul(per_rank, static_cast<std::uint64_t>(ranks_on_node));
  if (total <= available) return;
  const bool model = need.model_bytes >= need.batch_bytes;
  const std::string key = model ? "model.hidden" : "data.batch_size";
  const std::string part =
      model ? fmt::format("the model's {} parameters need {} for weights, gradients, buckets and optimizer state",
                          need.parameters, bytes_text(need.model_bytes))
            : fmt::format("a batch of {} needs {}", config.data.batch_size, bytes_text(need.batch_bytes));
  throw ConfigError(fmt::format("{}: {}: {} per rank; {} rank{} on this node need {}, more than the {} available",
                                config.origin(key), key, part, ranks_on_node, ranks_on_node == 1 ? "" : "s",
                                bytes_text(total), bytes_text(available)));
}

}  // namespace mpitrain::app
