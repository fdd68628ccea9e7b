#include "train_config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "config_schema.hpp"

namespace mpitrain::app {
namespace {

// Where a value came from, for error messages: "run.yaml:12:5" or "--set a.b=v".
struct Origin {
  std::string where;
};

Origin origin_of(const std::string& file, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return {file};
  return {file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1)};
}

[[noreturn]] void fail(const Origin& at, std::string_view key, const std::string& what) {
  throw ConfigError(at.where + ": " + std::string(key) + ": " + what);
}

std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

std::string range_text(const KeySpec& k) {
  if (k.min && k.max) {
    return fmt::format(" in {}{}, {}{}", k.min_exclusive ? "(" : "[", *k.min, *k.max,
                       k.max_exclusive ? ")" : "]");
  }
  if (k.min) return fmt::format(" {} {}", k.min_exclusive ? ">" : ">=", *k.min);
  if (k.max) return fmt::format(" {} {}", k.max_exclusive ? "<" : "<=", *k.max);
  return "";
}

void check_range(const KeySpec& k, double v, const Origin& at, const YAML::Node& n) {
  const bool below = k.min && (k.min_exclusive ? v <= *k.min : v < *k.min);
  const bool above = k.max && (k.max_exclusive ? v >= *k.max : v > *k.max);
  if (below || above || !std::isfinite(v)) {
    fail(at, k.path, "expected a value" + range_text(k) + ", got " + describe(n));
  }
}

bool is_null(const YAML::Node& n) {
  return n.IsNull() || (n.IsScalar() && (n.Scalar() == "null" || n.Scalar() == "~") &&
                        n.Tag() != "!");
}

std::int64_t as_integer(const KeySpec& k, const YAML::Node& n, const Origin& at) {
  std::int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<std::int64_t>::decode(n, v)) {
    fail(at, k.path, "expected an integer" + range_text(k) + ", got " + describe(n));
  }
  check_range(k, static_cast<double>(v), at, n);
  return v;
}

// Returns `v` as a YAML scalar in its shortest form that reads back as the same double
// ("0.0003", not the "0.00029999999999999997" of yaml-cpp's 17 digits), with a ".0" before
// any exponent ("1.0e-05"): YAML 1.1 readers such as PyYAML take "1e-05" for a string.
YAML::Node number_node(double v) {
  std::string text = fmt::format("{}", v);
  const std::size_t e = text.find('e');
  if (e != std::string::npos && text.find('.') == std::string::npos) text.insert(e, ".0");
  return YAML::Node(text);
}

double as_number(const KeySpec& k, const YAML::Node& n, const Origin& at) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) {
    fail(at, k.path, "expected a number" + range_text(k) + ", got " + describe(n));
  }
  check_range(k, v, at, n);
  return v;
}

// Validates `n` against `k`; returns it normalised to a YAML node (so that later stages
// read plain, already-checked values).
YAML::Node validate(const KeySpec& k, const YAML::Node& n, const Origin& at) {
  if (is_null(n)) {
    if (!k.nullable) fail(at, k.path, "may not be null");
    return YAML::Node(YAML::NodeType::Null);
  }
  switch (k.kind) {
    case ValueKind::integer: return YAML::Node(as_integer(k, n, at));
    case ValueKind::number: return number_node(as_number(k, n, at));
    case ValueKind::boolean: {
      bool b = false;
      if (!n.IsScalar() || !YAML::convert<bool>::decode(n, b)) {
        fail(at, k.path, "expected true or false, got " + describe(n));
      }
      return YAML::Node(b);
    }
    case ValueKind::string:
      if (!n.IsScalar()) fail(at, k.path, "expected a string, got " + describe(n));
      return YAML::Node(n.Scalar());
    case ValueKind::choice: {
      if (n.IsScalar()) {
        for (std::string_view c : k.choices) {
          if (n.Scalar() == c) return YAML::Node(n.Scalar());
        }
      }
      std::string list;
      for (std::string_view c : k.choices) list += (list.empty() ? "" : ", ") + std::string(c);
      fail(at, k.path, "expected one of " + list + ", got " + describe(n));
    }
    case ValueKind::integer_list:
    case ValueKind::number_list: {
      const char* what = k.kind == ValueKind::integer_list ? "integers" : "numbers";
      if (!n.IsSequence() || (k.list_size && n.size() != *k.list_size) || n.size() == 0) {
        const std::string size = k.list_size ? std::to_string(*k.list_size) + " " : "";
        fail(at, k.path, "expected a list of " + size + what + range_text(k) + ", got " +
                             describe(n));
      }
      YAML::Node out(YAML::NodeType::Sequence);
      for (const YAML::Node& item : n) {
        if (k.kind == ValueKind::integer_list) {
          out.push_back(as_integer(k, item, at));
        } else {
          out.push_back(number_node(as_number(k, item, at)));
        }
      }
      return out;
    }
  }
  fail(at, k.path, "unsupported kind");
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Returns the names (last path component) of the keys and sections directly under `prefix`.
std::vector<std::string> children_of(const std::string& prefix) {
  std::vector<std::string> names;
  for (const KeySpec& k : config_schema()) {
    const std::string_view path = k.path;
    if (!prefix.empty() && !(path.starts_with(prefix) && path.size() > prefix.size() &&
                             path[prefix.size()] == '.')) {
      continue;
    }
    const std::string_view rest = prefix.empty() ? path : path.substr(prefix.size() + 1);
    std::string name(rest.substr(0, rest.find('.')));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

using Values = std::map<std::string, YAML::Node>;
using Origins = std::map<std::string, std::string>;

void unknown_key(const Origin& at, const std::string& prefix, const std::string& name) {
  const std::string suggestion = closest_name(name, children_of(prefix));
  std::string msg = "unknown key '" + join(prefix, name) + "'";
  if (!suggestion.empty()) msg += "; did you mean '" + join(prefix, suggestion) + "'?";
  throw ConfigError(at.where + ": " + msg);
}

void read_mapping(const std::string& file, const YAML::Node& map, const std::string& prefix,
                  Values& values, Origins& origins) {
  std::map<std::string, std::string> seen;  // name -> where it was first given
  for (const auto& entry : map) {
    const Origin at = origin_of(file, entry.first);
    if (!entry.first.IsScalar()) throw ConfigError(at.where + ": keys must be plain names");
    const std::string name = entry.first.Scalar();
    const std::string path = join(prefix, name);
    // YAML forbids a key twice in one mapping; yaml-cpp keeps both, and the later would win
    // without a word.
    if (const auto [first, fresh] = seen.emplace(name, at.where); !fresh) {
      throw ConfigError(at.where + ": '" + path + "' is given twice in the same mapping (first at " +
                        first->second + "); keep one");
    }
    if (const KeySpec* k = find_key(path)) {
      const Origin value_at = origin_of(file, entry.second);
      values[path] = validate(*k, entry.second, value_at);
      origins[path] = value_at.where;
    } else if (is_section(path)) {
      if (is_null(entry.second)) continue;  // an empty section keeps its defaults
      if (!entry.second.IsMap()) {
        fail(origin_of(file, entry.second), path, "expected a mapping, got " + describe(entry.second));
      }
      read_mapping(file, entry.second, path, values, origins);
    } else {
      unknown_key(at, prefix, name);
    }
  }
}

void apply_override(const std::string& text, Values& values, Origins& origins) {
  const Origin at{"--set " + text};
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(at.where + ": expected key.path=value");
  }
  const std::string path = text.substr(0, eq);
  const KeySpec* k = find_key(path);
  if (k == nullptr) {
    std::vector<std::string> all;
    for (const KeySpec& s : config_schema()) all.emplace_back(s.path);
    const std::string suggestion = closest_name(path, all);
    std::string msg = "unknown key '" + path + "'";
    if (is_section(path)) msg = "'" + path + "' is a section; set one of its keys";
    if (!suggestion.empty()) msg += "; did you mean '" + suggestion + "'?";
    throw ConfigError(at.where + ": " + msg);
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    fail(at, path, std::string("not a YAML value: ") + e.what());
  }
  values[path] = validate(*k, value, at);
  origins[path] = at.where;
}

std::optional<std::string> opt_string(const Values& v, const std::string& key) {
  const YAML::Node& n = v.at(key);
  if (n.IsNull()) return std::nullopt;
  return n.as<std::string>();
}
template <class T>
std::optional<T> opt(const Values& v, const std::string& key) {
  const YAML::Node& n = v.at(key);
  if (n.IsNull()) return std::nullopt;
  return n.as<T>();
}

// Returns the YAML rendering of `values` (or of the defaults, with comments); with
// `origins`, each key's comment starts with where its value came from.
std::string render(const Values* values, const Origins* origins = nullptr) {
  std::ostringstream out;
  std::vector<std::string> open;  // currently open section path components
  for (const KeySpec& k : config_schema()) {
    std::vector<std::string> parts;
    std::string path(k.path);
    for (std::size_t pos = 0;;) {
      const auto dot = path.find('.', pos);
      parts.push_back(path.substr(pos, dot - pos));
      if (dot == std::string::npos) break;
      pos = dot + 1;
    }
    std::size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    open.resize(common);
    for (std::size_t i = common; i + 1 < parts.size(); ++i) {
      out << std::string(2 * i, ' ') << parts[i] << ":\n";
      open.push_back(parts[i]);
    }
    const std::string indent(2 * (parts.size() - 1), ' ');
    std::string value(k.default_yaml);
    const auto set_at = origins != nullptr ? origins->find(path) : Origins::const_iterator{};
    const bool is_default = origins != nullptr && set_at == origins->end();
    if (values != nullptr && !is_default) {
      YAML::Emitter e;
      e << YAML::Flow << values->at(path);
      value = e.c_str();
      if (value.empty() || value == "~") value = "null";
      if (value == "no") value = "\"no\"";
    }
    out << indent << parts.back() << ": " << value;
    if (origins != nullptr) out << "  # [" << (is_default ? std::string("default") : set_at->second) << "]";
    if (values == nullptr || origins != nullptr) out << (origins != nullptr ? " " : "  # ") << k.help;
    out << "\n";
  }
  return out.str();
}

// Returns every key's value: the defaults, then the file at `path` (if any), then
// `overrides` in order; `origins` receives where each set key came from.
Values read_values(const std::string& path, const std::vector<std::string>& overrides, Origins& origins) {
  Values v;
  for (const KeySpec& k : config_schema()) {
    v[std::string(k.path)] = validate(k, YAML::Load(std::string(k.default_yaml)), {"defaults"});
  }
  if (!path.empty()) {
    YAML::Node root;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      throw ConfigError(path + ": --config names a folder, not a config file");
    }
    try {
      root = YAML::LoadFile(path);
    } catch (const YAML::BadFile&) {
      throw ConfigError(path + ": --config: cannot open the config file");
    } catch (const YAML::ParserException& e) {
      throw ConfigError(path + ":" + std::to_string(e.mark.line + 1) + ":" +
                        std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
    } catch (const std::exception& e) {  // the stream failing underneath (a read error)
      throw ConfigError(path + ": --config: cannot read the config file: " + e.what());
    }
    if (!root.IsNull()) {
      if (!root.IsMap()) throw ConfigError(path + ": the config must be a mapping of keys");
      read_mapping(path, root, "", v, origins);
    }
  }
  for (const std::string& o : overrides) apply_override(o, v, origins);
  return v;
}

// Returns the model section: the kind and each kind's own keys.
ModelConfig read_model(const Values& v) {
  ModelConfig m;
  m.kind = v.at("model.kind").as<std::string>();
  m.mlp.hidden = v.at("model.hidden").as<std::vector<std::int64_t>>();
  m.mlp.activation = v.at("model.activation").as<std::string>();
  m.mlp.dropout = v.at("model.dropout").as<double>();
  m.torchscript.path = opt_string(v, "model.path").value_or("");
  m.torchscript.task = v.at("model.task").as<std::string>();
  m.torchscript.input_shape = opt<std::vector<std::int64_t>>(v, "model.input_shape").value_or(std::vector<std::int64_t>{});
  return m;
}

void read_data(const Values& v, TrainConfig& c) {
  c.data.kind = v.at("data.kind").as<std::string>();
  for (auto [name, src] : {std::pair{"train", &c.data.train}, std::pair{"test", &c.data.test}}) {
    const std::string p = std::string("data.") + name + ".";
    src->images = opt_string(v, p + "images");
    src->labels = opt_string(v, p + "labels");
    src->file = opt_string(v, p + "file");
    src->features = opt_string(v, p + "features");
  }
  c.data.synthetic.train_size = v.at("data.synthetic.train_size").as<std::int64_t>();
  c.data.synthetic.test_size = v.at("data.synthetic.test_size").as<std::int64_t>();
  c.data.synthetic.features = v.at("data.synthetic.features").as<std::int64_t>();
  c.data.synthetic.classes = v.at("data.synthetic.classes").as<std::int64_t>();
  c.data.text.path = v.at("data.text.path").as<std::string>();
  c.data.text.block_size = v.at("data.text.block_size").as<std::int64_t>();
  c.data.text.validation_fraction = v.at("data.text.validation_fraction").as<double>();
  c.data.tokens.train = opt_string(v, "data.tokens.train");
  c.data.tokens.val = opt_string(v, "data.tokens.val");
  c.data.tokens.validation_fraction = v.at("data.tokens.validation_fraction").as<double>();
  c.data.tokens.block_size = v.at("data.tokens.block_size").as<std::int64_t>();
  c.data.tokens.vocab_size = v.at("data.tokens.vocab_size").as<std::int64_t>();
  c.data.classes = opt<std::int64_t>(v, "data.classes");
  c.data.batch_size = v.at("data.batch_size").as<std::int64_t>();
  c.data.shuffle = v.at("data.shuffle").as<bool>();
  c.data.drop_last = v.at("data.drop_last").as<bool>();
  c.data.split_batches = v.at("data.split_batches").as<bool>();
  c.data.even_batches = v.at("data.even_batches").as<bool>();
}

void read_optimization(const Values& v, TrainConfig& c) {
  c.optimizer.kind = v.at("optimizer.kind").as<std::string>();
  c.optimizer.lr = v.at("optimizer.lr").as<double>();
  c.optimizer.weight_decay = v.at("optimizer.weight_decay").as<double>();
  c.optimizer.betas = v.at("optimizer.betas").as<std::vector<double>>();
  c.optimizer.eps = v.at("optimizer.eps").as<double>();
  c.optimizer.momentum = v.at("optimizer.momentum").as<double>();
  c.optimizer.nesterov = v.at("optimizer.nesterov").as<bool>();
  c.scheduler.kind = v.at("scheduler.kind").as<std::string>();
  c.scheduler.warmup_steps = v.at("scheduler.warmup_steps").as<std::int64_t>();
  c.training.epochs = v.at("training.epochs").as<std::int64_t>();
  c.training.max_steps = opt<std::int64_t>(v, "training.max_steps");
  c.training.gradient_accumulation_steps =
      v.at("training.gradient_accumulation_steps").as<std::int64_t>();
  c.training.max_grad_norm = opt<double>(v, "training.max_grad_norm");
  c.training.mixed_precision = v.at("training.mixed_precision").as<std::string>();
  c.training.nan_policy = v.at("training.nan_policy").as<std::string>();
  c.training.max_consecutive_skipped_steps = v.at("training.max_consecutive_skipped_steps").as<std::int64_t>();
  c.training.log_every = v.at("training.log_every").as<std::int64_t>();
  c.training.eval = v.at("training.eval").as<bool>();
}

void read_run(const Values& v, TrainConfig& c) {
  c.distributed.bucket_cap_mb = v.at("distributed.bucket_cap_mb").as<double>();
  c.distributed.first_bucket_mb = v.at("distributed.first_bucket_mb").as<double>();
  c.distributed.overlap = v.at("distributed.overlap").as<bool>();
  c.distributed.grad_comm_dtype = v.at("distributed.grad_comm_dtype").as<std::string>();
  c.distributed.zero_stage = v.at("distributed.zero_stage").as<std::int64_t>();
  c.distributed.timeout_s = v.at("distributed.timeout_s").as<double>();
  c.distributed.debug_collectives = v.at("distributed.debug_collectives").as<bool>();
  c.distributed.algorithm_table = opt_string(v, "distributed.algorithm_table");
  c.project.dir = v.at("project.dir").as<std::string>();
  c.project.automatic_checkpoint_naming = v.at("project.automatic_checkpoint_naming").as<bool>();
  c.project.total_limit = opt<std::int64_t>(v, "project.total_limit");
  c.project.save_every_steps = opt<std::int64_t>(v, "project.save_every_steps");
  c.project.resume = v.at("project.resume").as<std::string>();
  c.project.overwrite = v.at("project.overwrite").as<bool>();
  c.project.save_format = v.at("project.save_format").as<std::string>();
}

// Throws ConfigError for settings that are valid alone but not together; `where` is the
// config file, or "config".
void check_combinations(const TrainConfig& c, const std::string& where) {
  if (c.optimizer.kind == "sgd" && c.optimizer.nesterov && c.optimizer.momentum <= 0.0) {
    throw ConfigError(where + ": optimizer.nesterov: needs optimizer.momentum > 0");
  }
  if (c.model.kind == "torchscript" && c.model.torchscript.path.empty()) {
    throw ConfigError(c.origin("model.kind") +
                      ": model.path: model.kind torchscript needs model.path (a file saved by torch.jit.save)");
  }
  const bool token_data = c.data.kind == "text" || c.data.kind == "tokens";
  if (c.model.torchscript.task == "language_model" && (c.model.kind != "torchscript" || !token_data)) {
    throw ConfigError(c.origin("model.task") +
                      ": model.task: language_model needs model.kind torchscript and data.kind text or tokens");
  }
  if (token_data && (c.model.kind != "torchscript" || c.model.torchscript.task != "language_model")) {
    throw ConfigError(c.origin("data.kind") + ": data.kind: " + c.data.kind +
                      " data trains model.kind torchscript with model.task language_model");
  }
  if (c.data.kind == "tokens" && !c.data.tokens.train) {
    throw ConfigError(c.origin("data.kind") +
                      ": data.tokens.train: data.kind tokens needs data.tokens.train (an llm.c .bin shard or a glob)");
  }
  if (c.data.kind == "idx") {
    if (!c.data.train.images || !c.data.train.labels) {
      throw ConfigError(where + ": data.train: idx data needs both images and labels");
    }
    if (c.data.test.images.has_value() != c.data.test.labels.has_value()) {
      throw ConfigError(where + ": data.test: idx data needs both images and labels (or neither)");
    }
  }
  if (c.data.kind == "hdf5" && (!c.data.train.file || !c.data.train.features || !c.data.train.labels)) {
    throw ConfigError(where + ": data.train: hdf5 data needs file, features and labels");
  }
  if (c.scheduler.kind == "constant" && c.scheduler.warmup_steps < 0) {
    throw ConfigError(where + ": scheduler.warmup_steps: must be >= 0");
  }
  if (c.project.total_limit && !c.project.automatic_checkpoint_naming) {
    // step_<S> folders are the user's to keep: the library deletes automatic ones only.
    throw ConfigError(c.origin("project.total_limit") +
                      ": project.total_limit: needs project.automatic_checkpoint_naming: true "
                      "(checkpoints/step_<S> folders are never deleted); unset one of the two");
  }
}

}  // namespace

std::string default_config_yaml() { return render(nullptr); }

std::string effective_config_yaml(const std::string& path, const std::vector<std::string>& overrides) {
  (void)load_config(path, overrides);  // every check of a run
  Origins origins;
  const Values v = read_values(path, overrides, origins);
  return render(&v, &origins);
}

std::string TrainConfig::origin(const std::string& key) const {
  const auto it = origins.find(key);
  return it != origins.end() ? it->second : source;
}

std::string TrainConfig::block_size_key() const {
  return data.kind == "tokens" ? "data.tokens.block_size" : "data.text.block_size";
}

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Origins origins;
  const Values v = read_values(path, overrides, origins);
  TrainConfig c;
  c.origins = origins;
  c.source = path.empty() ? std::string("config") : path;
  c.seed = v.at("seed").as<std::int64_t>();
  c.model = read_model(v);
  read_data(v, c);
  read_optimization(v, c);
  read_run(v, c);
  check_combinations(c, c.source);
  c.yaml = render(&v);
  return c;
}

}  // namespace mpitrain::app
