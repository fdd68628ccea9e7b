// The agreement of prepare() and register_parameters(): before anything changes, every rank
// learns whether some rank's arguments are invalid, whether the ranks' settings differ and
// whether their parameter lists differ, so that an error is thrown on every rank, naming the
// rank(s) and the first difference. Cost: one allgather of three 64-bit values per rank; an
// error or a mismatch adds one allgather and one allgatherv of the texts that name it.

#include "mpitrain/engine/detail/prepare_agreement.hpp"

#include <algorithm>
#include <array>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mpitrain::detail {
namespace {

// Returns why ranks whose `key` differs cannot work together (the end of the message).
std::string why_equal(std::string_view key) {
  if (key.starts_with("data.")) {
    return " (they decide how many batches each rank reads, so how many gradient "
           "synchronisations an epoch has, and which examples; they must be equal on every rank)";
  }
  if (key.starts_with("project.")) {
    return " (it decides which collectives save_state() and load_state() run, so it must be "
           "equal on every rank)";
  }
  return " (they decide the gradient buckets and the collectives, so they must be equal on "
         "every rank)";
}

struct ParamLine {
  std::string name;
  std::string shape;
};

std::vector<ParamLine> parse_description(std::string_view text) {
  std::vector<ParamLine> lines;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    const std::size_t tab = line.find('\t');
    lines.push_back({std::string(line.substr(0, tab)),
                     tab == std::string_view::npos ? std::string() : std::string(line.substr(tab + 1))});
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::string quote(const ParamLine* line) {
  if (line == nullptr) return "no parameter there";
  return "'" + line->name + "' " + line->shape;
}

// Throws std::invalid_argument naming every rank whose `local_error` is set, and why; a
// cause every failing rank gives alike (a setting all ranks share) is said once.
// Collective: every rank calls it when some rank's error flag is set.
[[noreturn]] void throw_invalid_arguments(const Communicator& comm, const std::string& prefix,
                                          const std::string& local_error) {
  const std::vector<std::string> errors = comm.allgather_strings(local_error);
  std::string failing;
  std::string causes;
  std::string common;
  bool alike = true;
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    if (common.empty()) common = errors[r];
    alike = alike && errors[r] == common;
    failing += (failing.empty() ? "" : ", ") + std::to_string(r);
    causes += "; rank " + std::to_string(r) + ": " + errors[r];
  }
  const bool several = failing.find(',') != std::string::npos;
  throw std::invalid_argument(prefix + "invalid arguments on rank(s) " + failing +
                              (several && alike ? ": " + common : causes) +
                              " (nothing was prepared, on any rank)");
}

// Throws std::invalid_argument naming the first setting ("key\tvalue" lines of `settings`)
// that differs between the ranks, the ranks and their values. Collective.
[[noreturn]] void throw_settings_differ(const Communicator& comm, const std::string& prefix,
                                        const std::string& settings) {
  const std::vector<std::string> texts = comm.allgather_strings(settings);
  std::vector<std::vector<ParamLine>> lists;
  for (const std::string& t : texts) lists.push_back(parse_description(t));
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    std::string diffs;
    for (std::size_t r = 1; r < lists.size(); ++r) {
      const bool same = i < lists[r].size() && lists[r][i].name == lists[0][i].name &&
                        lists[r][i].shape == lists[0][i].shape;
      if (same) continue;
      diffs += ", rank " + std::to_string(r) + " has " +
               (i < lists[r].size() && lists[r][i].name == lists[0][i].name
                    ? lists[r][i].shape
                    : std::string("no such setting"));
    }
    if (diffs.empty()) continue;
    throw std::invalid_argument(prefix + "the ranks' engine settings differ at " +
                                lists[0][i].name + ": rank 0 has " + lists[0][i].shape + diffs +
                                why_equal(lists[0][i].name));
  }
  // Rank 0's list is a prefix of another's (fp16 adds the loss scaler's keys, a loader
  // its own).
  for (std::size_t r = 1; r < lists.size(); ++r) {
    if (lists[r].size() > lists[0].size()) {
      const ParamLine& extra = lists[r][lists[0].size()];
      throw std::invalid_argument(prefix + "the ranks' engine settings differ at " + extra.name +
                                  ": rank 0 has no such setting, rank " + std::to_string(r) +
                                  " has " + extra.shape + why_equal(extra.name));
    }
  }
  throw std::runtime_error(prefix + "the ranks' engine settings hash differently but read the same");
}

// Throws std::runtime_error naming the first parameter ("name\tshape" lines of
// `description`) that differs between the ranks. Collective.
[[noreturn]] void throw_parameters_differ(const Communicator& comm, const std::string& prefix,
                                          const std::string& description) {
  const std::vector<std::string> texts = comm.allgather_strings(description);
  std::vector<std::vector<ParamLine>> lists;
  for (const std::string& t : texts) lists.push_back(parse_description(t));
  std::size_t longest = 0;
  for (const auto& l : lists) longest = std::max(longest, l.size());
  for (std::size_t i = 0; i < longest; ++i) {
    const ParamLine* ref = i < lists[0].size() ? &lists[0][i] : nullptr;
    std::string diffs;
    for (std::size_t r = 1; r < lists.size(); ++r) {
      const ParamLine* other = i < lists[r].size() ? &lists[r][i] : nullptr;
      const bool same = ref != nullptr && other != nullptr && ref->name == other->name &&
                        ref->shape == other->shape;
      if (same) continue;
      diffs += "; rank " + std::to_string(r) + " has " + quote(other);
    }
    if (diffs.empty()) continue;
    std::ostringstream msg;
    msg << prefix << "the ranks' models differ at parameter #" << i << ": rank 0 has "
        << quote(ref) << diffs << " (parameter counts by rank:";
    for (std::size_t r = 0; r < lists.size(); ++r) msg << (r ? ", " : " ") << lists[r].size();
    msg << ")";
    throw std::runtime_error(msg.str());
  }
  throw std::runtime_error(prefix + "the ranks' parameter lists hash differently but read the same");
}

}  // namespace

std::uint64_t fingerprint(std::string_view text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

std::string describe_settings(const EngineConfig& config) {
  std::string out;
  for (const auto& [key, value] : config.cross_rank_settings()) out += key + '\t' + value + '\n';
  return out;
}

void agree_on_prepare(const Communicator& comm, std::string_view who, const std::string& settings,
                      const std::string& description, const std::string& local_error) {
  const std::array<std::int64_t, 3> mine = {
      local_error.empty() ? 0 : 1, static_cast<std::int64_t>(fingerprint(settings)),
      static_cast<std::int64_t>(fingerprint(description))};
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.allgather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
  const std::string prefix = std::string(who) + " (rank " + std::to_string(comm.rank()) + "): ";
  auto differs = [&](std::size_t field) {
    for (std::size_t r = 0; r < all.size(); r += mine.size()) {
      if (all[r + field] != all[field]) return true;
    }
    return false;
  };

  // 1. Some rank's own arguments are invalid: every rank learns which, and why.
  bool any_error = false;
  for (std::size_t r = 0; r < all.size(); r += mine.size()) any_error = any_error || all[r] != 0;
  if (any_error) throw_invalid_arguments(comm, prefix, local_error);
  // 2. The engine settings differ: name the first differing key, the ranks and the values.
  if (differs(1)) throw_settings_differ(comm, prefix, settings);
  // 3. The parameter lists differ: name the first differing parameter.
  if (differs(2)) throw_parameters_differ(comm, prefix, description);
}

}  // namespace mpitrain::detail
