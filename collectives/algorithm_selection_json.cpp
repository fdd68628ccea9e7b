// AlgorithmSelection as a JSON file: what `collective_bench --tune` writes and what
// MPITRAIN_ALGORITHM_TABLE / distributed.algorithm_table name.

#include <nlohmann/json.hpp>

#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "mpitrain/collectives/algorithm_selection.hpp"

namespace mpitrain {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "mpitrain-algorithm-table";
constexpr int kVersion = 1;
constexpr DType kTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64,
                            DType::u8,  DType::bf16, DType::f16};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

// Returns ["f32", ...] for a set of types, or "*" for any.
json types_json(DTypeSet set) {
  if (set == kAnyDType) return "*";
  json out = json::array();
  for (DType t : kTypes) {
    if ((set >> static_cast<unsigned>(t)) & 1U) out.push_back(std::string(to_string(t)));
  }
  return out;
}

json ops_json(ReduceOpSet set) {
  if (set == kAnyReduceOp) return "*";
  json out = json::array();
  for (ReduceOp o : kOps) {
    if ((set >> static_cast<unsigned>(o)) & 1U) out.push_back(std::string(to_string(o)));
  }
  return out;
}

template <class T> json bound(T v) {
  return v == std::numeric_limits<T>::max() ? json(nullptr) : json(v);
}

template <class T> T bound_from(const json& j, T none) { return j.is_null() ? none : j.get<T>(); }

json rule_json(const SelectionRule& r) {
  const char* wire = r.wire == SelectionRule::Wire::any ? "any"
                     : r.wire == SelectionRule::Wire::no ? "no"
                                                         : "yes";
  return {{"op", std::string(to_string(r.op))},
          {"types", types_json(r.types)},
          {"reduces", ops_json(r.reduces)},
          {"wire", wire},
          {"ranks", {r.min_ranks, bound(r.max_ranks)}},
          {"local_ranks", {r.min_local_ranks, bound(r.max_local_ranks)}},
          {"nodes", {r.min_nodes, bound(r.max_nodes)}},
          {"bytes", {r.min_bytes, bound(r.end_bytes)}},
          {"bytes_per_peer", r.bytes_per_peer},
          {"algorithm", r.algorithm}};
}

// Returns the rule of `j`; throws std::invalid_argument (the caller adds the file) on any
// unknown name or malformed field.
SelectionRule rule_from(const json& j) {
  SelectionRule r;
  r.op = parse_collective(j.at("op").get<std::string>());
  if (const json& t = j.at("types"); !(t.is_string() && t.get<std::string>() == "*")) {
    r.types = 0;
    for (const json& name : t) r.types |= dtype_set({parse_dtype(name.get<std::string>())});
  }
  if (const json& o = j.at("reduces"); !(o.is_string() && o.get<std::string>() == "*")) {
    r.reduces = 0;
    for (const json& name : o) r.reduces |= reduce_op_set({parse_reduce_op(name.get<std::string>())});
  }
  const std::string wire = j.value("wire", "any");
  if (wire != "any" && wire != "no" && wire != "yes") {
    throw std::invalid_argument("wire must be any, no or yes, not '" + wire + "'");
  }
  r.wire = wire == "any" ? SelectionRule::Wire::any
           : wire == "no" ? SelectionRule::Wire::no
                          : SelectionRule::Wire::yes;
  const auto range = [&](const char* key, int& lo, int& hi) {
    if (!j.contains(key)) return;
    lo = j[key].at(0).get<int>();
    hi = bound_from(j[key].at(1), std::numeric_limits<int>::max());
    if (lo < 1 || hi < lo) throw std::invalid_argument(std::string(key) + " out of order");
  };
  range("ranks", r.min_ranks, r.max_ranks);
  range("local_ranks", r.min_local_ranks, r.max_local_ranks);
  range("nodes", r.min_nodes, r.max_nodes);
  if (j.contains("bytes")) {
    r.min_bytes = j["bytes"].at(0).get<std::size_t>();
    r.end_bytes = bound_from(j["bytes"].at(1), std::numeric_limits<std::size_t>::max());
    if (r.end_bytes <= r.min_bytes) throw std::invalid_argument("bytes: empty range");
  }
  r.bytes_per_peer = j.value("bytes_per_peer", false);
  r.algorithm = j.at("algorithm").get<std::string>();
  require_algorithm(r.op, r.algorithm);
  return r;
}

}  // namespace

AlgorithmSelection AlgorithmSelection::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("algorithm table '" + path + "' cannot be read");
  std::vector<SelectionRule> rules;
  try {
    const json doc = json::parse(in);
    if (doc.value("format", "") != kFormat || doc.value("version", 0) != kVersion) {
      throw std::invalid_argument("not a version-1 mpitrain-algorithm-table");
    }
    std::size_t i = 0;
    for (const json& r : doc.at("rules")) {
      try {
        rules.push_back(rule_from(r));
      } catch (const std::exception& e) {
        throw std::invalid_argument("rule " + std::to_string(i) + ": " + e.what());
      }
      ++i;
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("algorithm table '" + path + "': " + e.what());
  }
  return AlgorithmSelection(std::move(rules));
}

void AlgorithmSelection::save(const std::string& path, const std::string& comment) const {
  json rules = json::array();
  for (const SelectionRule& r : rules_) rules.push_back(rule_json(r));
  const json doc = {{"format", kFormat}, {"version", kVersion}, {"comment", comment},
                    {"rules", rules}};
  std::ofstream out(path);
  out << doc.dump(1) << '\n';
  if (!out) throw std::runtime_error("algorithm table '" + path + "' cannot be written");
}

std::uint64_t AlgorithmSelection::digest() const {
  json rules = json::array();
  for (const SelectionRule& r : rules_) rules.push_back(rule_json(r));
  // FNV-1a over the canonical text: the same rules give the same digest on every rank.
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : rules.dump()) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace mpitrain
