#pragma once
// Names of the checkpoint layout (DESIGN.md section 5): folder and file names, and the
// format version written into every checkpoint.
//
//   <project.dir>/checkpoints/checkpoint_<N>/      committed (has MANIFEST.json)
//   <project.dir>/checkpoints/checkpoint_<N>.tmp-<id>/   being written, or abandoned
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
// Returns true when `name` is a temporary folder of the commit protocol: "<anything>.tmp-<id>".
bool is_temp_folder_name(std::string_view name);

}  // namespace mpitrain::checkpoint
