#pragma once
// StateGroup: the state of one HDF5 group of a checkpoint, in memory. What the engine's
// components export for saving and get back when loading.
//
// On disk, inside the group G it is written to:
//   tensors  "k"      -> float32 dataset G/k (torch shape; Fletcher32, see h5_file.hpp)
//   strings  "k"      -> string dataset G/k
//   scalars  "k"      -> float64 attribute "k" of G
//   integers "k"      -> int64 attribute "k" of G
// A key may contain '/': the part before the last '/' names a subgroup (created as needed),
// so the optimizer's "0.weight/exp_avg" becomes dataset /optimizer/0.weight/exp_avg and its
// "0.weight/step" becomes attribute "step" of group /optimizer/0.weight. Dots are kept
// verbatim. Reading walks G recursively and maps every dataset and attribute back by type,
// so write then read gives the same StateGroup.
//
// Tensors may be views (Tensor::view) of live parameters: saving then copies nothing.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/tensor/state_dict.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::checkpoint {

struct StateGroup {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, std::string> strings;

  // Returns a group holding the dict's tensors and scalars (moved, so views stay views).
  static StateGroup from_state_dict(StateDict dict);
  // Returns the tensors and scalars as a StateDict; integers become scalars (exact up to
  // 2^53); throws CheckpointError if the group holds strings, or an integer key equals a
  // scalar key.
  StateDict to_state_dict() &&;

  bool empty() const noexcept {
    return tensors.empty() && scalars.empty() && integers.empty() && strings.empty();
  }
};

// Writes `state` into `group` as described above.
void write_state_group(H5Group& group, const StateGroup& state, const DatasetOptions& options = {});
// Returns everything below `group`; throws H5Error for objects the mapping does not cover
// (integer datasets, non-scalar attributes, links that are not hard links).
StateGroup read_state_group(const H5Group& group);

// Throws CheckpointError when `loaded` does not have exactly the keys of `expected` (in each
// of tensors, scalars, integers, strings) or a tensor's shape differs. The message starts
// with `what` (e.g. "checkpoint group /optimizer") and lists every problem: a missing key,
// an unexpected key, or a key with the loaded and the expected shape.
void check_same_structure(const StateGroup& loaded, const StateGroup& expected,
                          std::string_view what);
// The same for StateDicts (tensors and scalars).
void check_same_structure(const StateDict& loaded, const StateDict& expected,
                          std::string_view what);

}  // namespace mpitrain::checkpoint
