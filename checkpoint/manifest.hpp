#pragma once
// MANIFEST.json: the commit record of a checkpoint folder (DESIGN.md section 5).
//
//   {"format_version": 1, "step": 120, "epoch": 2, "world_size": 4,
//    "zero_stage": 1,                    (only when the optimizer state is sharded)
//    "created": "2024-05-01T12:34:56Z",
//    "files": {"rank_0.h5": {"bytes": 4096, "xxh3_128": "<32 hex digits>"}, ...,
//              "state.h5": {...}}}
//
// Keys appear in that order; "files" lists state.h5 and rank_<r>.h5 for every r below
// world_size, in name order. Digests are XXH3-128 in the hex form of file_hash.hpp.
// Verifying a folder reads every listed file once (cost: one sequential read of the
// checkpoint) and happens before any HDF5 code sees the files: HDF5 1.10 has known
// vulnerabilities to malformed files, so only byte-exact files we wrote reach it.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "mpitrain/checkpoint/file_hash.hpp"

namespace mpitrain::checkpoint {

struct Manifest {
  std::int64_t format_version = 0;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t world_size = 0;
  // The optimizer layout: 0, the whole state in state.h5 /optimizer (no key written); 1, each
  // rank file's /optimizer holds that rank's pieces (ZeRO stage 1, DESIGN.md section 5).
  std::int64_t zero_stage = 0;
  std::string created;                      // UTC, ISO 8601: "2024-05-01T12:34:56Z"
  std::map<std::string, FileDigest> files;  // plain file names in the checkpoint folder
};

// Returns the manifest as JSON text (2-space indent, keys in contract order).
std::string to_json(const Manifest& manifest);
// Returns the manifest parsed from `text`; throws CheckpointError naming `source` and the
// offending key for malformed JSON, missing or mistyped keys, a newer format_version, file
// names that are not plain names, or required files missing from "files".
Manifest parse_manifest(std::string_view text, const std::string& source);
// Returns the manifest of checkpoint folder `dir`; throws when there is none (the folder is
// not committed) or it is malformed.
Manifest read_manifest(const std::filesystem::path& dir);
// Writes dir/MANIFEST.json durably (written and fsynced; the folder itself is not synced).
void write_manifest(const std::filesystem::path& dir, const Manifest& manifest);
// Returns the manifest after checking every listed file: a regular file (not a link) with
// the recorded size, then the recorded XXH3-128 digest. Throws CheckpointError naming the
// file and both values at the first mismatch.
Manifest verify_checkpoint(const std::filesystem::path& dir);
// Returns the current UTC time as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_timestamp_now();

}  // namespace mpitrain::checkpoint
