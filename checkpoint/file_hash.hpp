#pragma once
// XXH3-128 digests of files, as MANIFEST.json records them.
//
// Hex form: 32 lowercase hex digits, the high 64 bits first, then the low 64 bits (each
// most significant digit first). That is XXH128_canonical_t's byte order, and what
// `xxh128sum` prints. Cost: one sequential read of the file; XXH3 hashes at memory speed
// (over 10 GB/s per core), so the read dominates.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace mpitrain::checkpoint {

struct FileDigest {
  std::uint64_t bytes = 0;
  std::string xxh3_128;  // 32 hex digits
};

// Returns the size and the XXH3-128 digest of `file` (seed 0).
FileDigest hash_file(const std::filesystem::path& file);
// Returns the XXH3-128 digest of `data` in the same hex form.
std::string xxh3_128_hex(std::span<const unsigned char> data);
// Returns the hex form of a digest given as its two 64-bit halves.
std::string xxh3_128_hex(std::uint64_t high64, std::uint64_t low64);

}  // namespace mpitrain::checkpoint
