// Fuzzes the IDX reader (data/idx_dataset.cpp): the input is split into an images file and a
// labels file (the first byte chooses where). Every malformed pair must end in the reader's
// documented std::runtime_error naming the file; a crash, a leak, undefined behaviour or any
// other exception (std::bad_alloc from a size taken on trust) is a finding.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "fuzz_input_file.hpp"
#include "mpitrain/data/idx_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size_bytes) {
  if (size_bytes < 1) return 0;
  const std::size_t split = 1 + (size_bytes - 1) * data[0] / 256;
  const mpitrain::fuzz::FuzzInputFile images(data + 1, split - 1);
  const mpitrain::fuzz::FuzzInputFile labels(data + split, size_bytes - split);
  try {
    const mpitrain::data::IdxDataset dataset({images.path(), labels.path()});
    // A dataset that loaded must read every example without faults.
    const std::size_t n = dataset.size();
    std::vector<float> features(dataset.feature_size());
    std::int32_t label = 0;
    for (std::size_t i = 0; i < n && i < 64; ++i) dataset.get(i, features, label);
  } catch (const std::runtime_error&) {
    // The documented rejection of a malformed file.
  }
  return 0;
}
