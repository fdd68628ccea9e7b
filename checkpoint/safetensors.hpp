#pragma once
// The safetensors format (Hugging Face), for fp32 weights:
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   JSON header: {"__metadata__": {string: string} (optional),
//             "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
//             padded with spaces to a multiple of 8 bytes, as the reference writer does
//   the data  tensors back to back, little-endian, row-major; offsets count from the first
//             byte after the header and cover the data without gaps or overlaps.
// Tensors are written in name order. Cost: one sequential write of the data.

#include <filesystem>
#include <map>
#include <string>
#include <span>

#include "mpitrain/tensor/named_tensor.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::checkpoint {

struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` (names must be unique and not "__metadata__") to a new file and fsyncs it.
void write_safetensors(const std::filesystem::path& file,
                       std::span<const NamedTensor> tensors,
                       const std::map<std::string, std::string>& metadata = {});
// Returns the tensors of an F32 safetensors file, after checking the header against the file
// size (lengths, offsets, shapes); throws CheckpointError naming the file and the problem.
SafetensorsContents read_safetensors(const std::filesystem::path& file);

}  // namespace mpitrain::checkpoint
