#pragma once
// AlgorithmSelection: which algorithm "default" runs, as a table of rules (the first rule that
// matches a call and whose algorithm can run it wins; "mpi" when none does).
//
// A rule matches on the collective, the element type (for fp32 data sent as 16 bits: the
// wire type), whether the data travels as 16-bit wire values, the reduce op, the number of
// ranks, of ranks per node and of nodes, and the bytes one rank contributes as sent; byte
// bounds may scale with size() - 1 (algorithms whose latency grows with the number of peers).
// Every rank of a communicator must hold the same table, so that every rank resolves
// "default" the same way.
//
// Tables are files too: `collective_bench --tune` measures a machine and writes one (JSON,
// see save()); a Communicator loads the file named by MPITRAIN_ALGORITHM_TABLE when it is
// constructed, and the trainer the one named by distributed.algorithm_table.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/collectives/collective.hpp"
#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain {

// A set of element types or of reduce ops, as a bit mask.
using DTypeSet = std::uint32_t;
using ReduceOpSet = std::uint32_t;
inline constexpr DTypeSet kAnyDType = ~DTypeSet{0};
inline constexpr ReduceOpSet kAnyReduceOp = ~ReduceOpSet{0};
constexpr DTypeSet dtype_set(std::initializer_list<DType> types) {
  DTypeSet s = 0;
  for (DType t : types) s |= DTypeSet{1} << static_cast<unsigned>(t);
  return s;
}
constexpr ReduceOpSet reduce_op_set(std::initializer_list<ReduceOp> ops) {
  ReduceOpSet s = 0;
  for (ReduceOp o : ops) s |= ReduceOpSet{1} << static_cast<unsigned>(o);
  return s;
}

// One call to resolve: what a rule can match on.
struct SelectionQuery {
  Collective op = Collective::allreduce;
  DType type = DType::f32;  // the wire type for fp32 data sent as 16 bits
  bool wire = false;        // fp32 data sent as 16-bit values
  ReduceOp reduce = ReduceOp::sum;
  std::size_t bytes = 0;    // one rank's contribution, as sent
  int ranks = 1;
  int local_ranks = 1;  // ranks on this node
  int nodes = 1;
};

struct SelectionRule {
  Collective op = Collective::allreduce;
  DTypeSet types = kAnyDType;
  ReduceOpSet reduces = kAnyReduceOp;
  enum class Wire : std::uint8_t { any, no, yes } wire = Wire::any;
  int min_ranks = 1;
  int max_ranks = std::numeric_limits<int>::max();
  int min_local_ranks = 1;
  int max_local_ranks = std::numeric_limits<int>::max();
  int min_nodes = 1;
  int max_nodes = std::numeric_limits<int>::max();
  // Bytes as sent, [min_bytes, end_bytes); times (ranks - 1) when bytes_per_peer.
  std::size_t min_bytes = 0;
  std::size_t end_bytes = std::numeric_limits<std::size_t>::max();
  bool bytes_per_peer = false;
  std::string algorithm;

  // Returns true when the rule applies to `q`.
  bool matches(const SelectionQuery& q) const noexcept;
};

class AlgorithmSelection {
 public:
  // The measured defaults of this library (see algorithm_selection.cpp for the figures).
  static AlgorithmSelection builtin();
  explicit AlgorithmSelection(std::vector<SelectionRule> rules);

  // Returns the name of the algorithm "default" runs for `q`: the first matching rule whose
  // algorithm `can_run` accepts, else "mpi". `can_run(name)` lets the caller exclude
  // algorithms that cannot run this call (no nonblocking form, a layout they do not support).
  template <class CanRun>
  std::string_view choose(const SelectionQuery& q, CanRun&& can_run) const {
    for (const SelectionRule& r : rules_) {
      if (r.matches(q) && can_run(std::string_view(r.algorithm))) return r.algorithm;
    }
    return "mpi";
  }
  const std::vector<SelectionRule>& rules() const noexcept { return rules_; }

  // Returns the table in `path` (JSON, as save() writes it). Throws std::runtime_error naming
  // the file and what is wrong (unreadable, not JSON, an unknown collective, type, op or
  // algorithm, a bound out of order).
  static AlgorithmSelection load(const std::string& path);
  // Writes the table to `path` as JSON: {"format": "mpitrain-algorithm-table", "version": 1,
  // "comment": ..., "rules": [{"op", "types", "reduces", "wire", "ranks", "local_ranks",
  // "nodes", "bytes", "bytes_per_peer", "algorithm"}, ...]} with ranges as [min, max] (bytes:
  // [min, end), null for no bound). Throws std::runtime_error when the file cannot be written.
  void save(const std::string& path, const std::string& comment = {}) const;
  // Returns a digest of the rules (ranks compare it to agree on one table).
  std::uint64_t digest() const;

 private:
  std::vector<SelectionRule> rules_;
};

}  // namespace mpitrain
