#pragma once
// Fletcher32 as HDF5 computes it for its checksum filter (H5_checksum_fletcher32), bit for
// bit, but fast enough not to matter next to disk I/O.
//
// HDF5's loop adds one big-endian 16-bit word at a time (about 3 GB/s on the development
// machine; HDF5's filter pipeline around it wrote 0.3 GB/s). Here each block of 360 words
// (HDF5's reduction period) is summed in 8 independent lanes with additions only: with S_l
// the lane sums and B_l the sums of the running lane sums,
//   sum1 += sum(S)   and   sum2 += n * sum1 + 8 * sum(B) - sum(l * S_l),
// which is exactly the sequential result (all modulo 2^32). Cost: a byte swap and four
// vector additions per 8 words (about 12 GB/s per core with SSE2).

#include <cstdint>
#include <span>

namespace mpitrain::checkpoint {

// Returns the Fletcher32 checksum of `data` in HDF5's definition (the filter stores it after
// the chunk's bytes, little-endian).
std::uint32_t fletcher32(std::span<const unsigned char> data) noexcept;

}  // namespace mpitrain::checkpoint
