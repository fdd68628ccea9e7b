#pragma once
// GoldenFile: reads the HDF5 golden data written by tests/nn/golden/*.py (float32 tensors,
// int32 label vectors, float32 scalars) for the nn parity tests. Test support only.

#include <cstdint>
#include <string>
#include <vector>

#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::nn::testing {

// Returns the path of a file in tests/nn/golden (MPITRAIN_TEST_DATA_DIR from CMake).
std::string golden_path(const std::string& file_name);

class GoldenFile {
 public:
  // Opens `path` read-only; throws std::runtime_error naming the path.
  explicit GoldenFile(const std::string& path);
  ~GoldenFile();
  GoldenFile(const GoldenFile&) = delete;
  GoldenFile& operator=(const GoldenFile&) = delete;

  // Returns dataset `name` ("linear/x") as a tensor of its shape; throws if absent.
  Tensor tensor(const std::string& name) const;
  // Returns int32 dataset `name` flattened.
  std::vector<std::int32_t> ints(const std::string& name) const;
  // Returns scalar float dataset `name`.
  float scalar(const std::string& name) const;

 private:
  std::string path_;
  std::int64_t file_;  // hid_t, kept out of this header
};

}  // namespace mpitrain::nn::testing
