#include "mpitrain/checkpoint/checkpoint_layout.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <limits>

namespace mpitrain::checkpoint {

std::string rank_file_name(int rank) { return "rank_" + std::to_string(rank) + ".h5"; }

std::string checkpoint_folder_name(std::int64_t n) { return "checkpoint_" + std::to_string(n); }

std::optional<std::int64_t> parse_checkpoint_folder_name(std::string_view name) {
  constexpr std::string_view prefix = "checkpoint_";
  if (!name.starts_with(prefix)) return std::nullopt;
  const std::string_view digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;  // 18 digits fit in int64
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  std::int64_t n = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

bool is_temp_folder_name(std::string_view name) {
  const std::size_t pos = name.rfind(kTempMarker);
  return pos != std::string_view::npos && pos > 0 && pos + kTempMarker.size() < name.size();
}

std::string temp_folder_name(std::string_view target_name, std::uint64_t id) {
  return fmt::format("{}{}{:016x}", target_name, kTempMarker, id);
}

bool is_commit_temp_folder_name(std::string_view name) {
  constexpr std::size_t kIdDigits = 16;
  const std::size_t suffix = kTempMarker.size() + kIdDigits;
  if (name.size() <= suffix) return false;  // the target name is not empty
  const std::size_t marker = name.size() - suffix;
  if (name.substr(marker, kTempMarker.size()) != kTempMarker) return false;
  for (const char c : name.substr(marker + kTempMarker.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace mpitrain::checkpoint
