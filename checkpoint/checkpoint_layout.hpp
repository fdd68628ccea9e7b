#pragma once
// Names of the checkpoint layout (DESIGN.md section 5): folder and file names, and the
// format version written into every checkpoint.
//
//   <project.dir>/checkpoints/checkpoint_<N>/      committed (has MANIFEST.json)
//   <project.dir>/checkpoints/checkpoint_<N>.tmp-<id>/   being written, or abandoned
//   (a save to an explicit folder F writes F.tmp-<id>/ beside it; <id> is 16 hex digits)
//       state.h5  rank_<r>.h5  MANIFEST.json

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mpitrain::checkpoint {

// Version of the checkpoint format (MANIFEST.json and state.h5 root attribute). Readers
// refuse newer versions.
inline constexpr std::int64_t kFormatVersion = 1;

inline constexpr std::string_view kCheckpointsFolder = "checkpoints";
inline constexpr std::string_view kStateFile = "state.h5";
inline constexpr std::string_view kManifestFile = "MANIFEST.json";
inline constexpr std::string_view kTempMarker = ".tmp-";

// Returns "rank_<r>.h5".
std::string rank_file_name(int rank);
// Returns "checkpoint_<n>".
std::string checkpoint_folder_name(std::int64_t n);
// Returns N when `name` is exactly "checkpoint_<N>" (decimal digits, no sign, no leading
// zeros except "0"), otherwise nothing.
std::optional<std::int64_t> parse_checkpoint_folder_name(std::string_view name);
// Returns true when `name` looks like a temporary folder: "<anything>.tmp-<anything>".
// Loading refuses such folders.
bool is_temp_folder_name(std::string_view name);
// Returns the name of the temporary folder a commit of `target_name` writes into:
// "<target_name>.tmp-<id as 16 lowercase hex digits>".
std::string temp_folder_name(std::string_view target_name, std::uint64_t id);
// Returns true when `name` is exactly what temp_folder_name() produces: a non-empty target
// name, ".tmp-", then 16 lowercase hex digits. Only such folders are removed as abandoned
// saves (a folder named otherwise was not made by this library, and is left alone).
bool is_commit_temp_folder_name(std::string_view name);

}  // namespace mpitrain::checkpoint
