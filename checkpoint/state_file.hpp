#pragma once
// The two HDF5 files of a checkpoint folder: state.h5 (replicated state, rank 0) and
// rank_<r>.h5 (one rank's own state). Layout: checkpoint_state.hpp. Writers build the file
// in memory and write it with one sequential pass and an fsync (h5_file.hpp); the file must
// not exist. Readers take a file that verify_checkpoint() has already checked byte for byte.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_state.hpp"
#include "mpitrain/checkpoint/file_hash.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/checkpoint/state_group.hpp"

namespace mpitrain::checkpoint {

// Returns the library version recorded in checkpoints ("0.1.0").
std::string mpitrain_version();

// Writes state.h5: `state.replicated`, `state.custom` and `state.config_yaml`. Returns the
// file's size and XXH3-128 (hashed while writing). `buffer`, if given, holds the file image
// (see H5ImageBuffer).
FileDigest write_state_file(const std::filesystem::path& file, const CheckpointState& state,
                            int world_size, const DatasetOptions& options = {},
                            H5ImageBuffer* buffer = nullptr);
// Writes rank_<rank>.h5 with the groups of `per_rank`; returns its size and XXH3-128.
FileDigest write_rank_file(const std::filesystem::path& file,
                           const std::map<std::string, StateGroup>& per_rank, int rank,
                           int world_size, const DatasetOptions& options = {},
                           H5ImageBuffer* buffer = nullptr);

struct StateFileContents {
  std::map<std::string, StateGroup> replicated;
  std::string config_yaml;
  std::vector<std::string> custom_names;  // children of /custom, in name order
  std::int64_t world_size = 0;
  std::string mpitrain_version;
};

// Returns everything in state.h5 except the /custom groups (read on demand by name);
// throws H5Error on a format_version this build does not read or an unknown root group.
StateFileContents read_state_file(const H5File& file);
// Returns the groups of rank_<rank>.h5; throws if the file records another rank.
std::map<std::string, StateGroup> read_rank_file(const H5File& file, int rank);

}  // namespace mpitrain::checkpoint
