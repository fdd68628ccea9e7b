#pragma once
// The trainer's configuration schema (DESIGN.md section 6): every key, its type, range,
// default and one line of help. It is the single source of the defaults, of
// `trainer print-config`, and of the strict validation of user files and --set overrides.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mpitrain::app {

enum class ValueKind { integer, number, boolean, string, choice, integer_list, number_list };

struct KeySpec {
  std::string_view path;          // "training.max_grad_norm"
  ValueKind kind;
  std::string_view default_yaml;  // YAML scalar or flow list: "null", "[256, 256]", "1.0e-3"
  std::string_view help;          // one line, printed as a comment by print-config
  bool nullable = false;
  std::vector<std::string_view> choices = {};  // for ValueKind::choice
  std::optional<double> min = {};              // lower bound (numbers, list items), inclusive
                                               // unless min_exclusive
  std::optional<double> max = {};              // inclusive upper bound
  bool max_exclusive = false;
  std::optional<std::size_t> list_size = {};   // exact length for lists
  bool min_exclusive = false;                  // min itself is refused (bucket sizes > 0)
};

// Returns every key of the schema, in print-config order.
std::span<const KeySpec> config_schema();
// Returns the spec of `path`, or nullptr when no key has that path.
const KeySpec* find_key(std::string_view path);
// Returns true when `path` names a section (a proper prefix of some key: "data.train").
bool is_section(std::string_view path);
// Returns the closest key or section name to `name` among `candidates`, or "" when none is
// close enough to suggest (edit distance at most max(2, |name| / 3)).
std::string closest_name(std::string_view name, std::span<const std::string> candidates);

}  // namespace mpitrain::app
