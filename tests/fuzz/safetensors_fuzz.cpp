// Fuzzes the safetensors reader (checkpoint/safetensors.cpp): the input is a whole file.
// Every malformed file must end in CheckpointError naming the file and the problem; a
// crash, a leak, undefined behaviour, or any other exception escaping (a std::bad_alloc
// from a header length or shape taken on trust) is a finding.

#include <cstddef>
#include <cstdint>

#include "fuzz_input_file.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size_bytes) {
  const mpitrain::fuzz::FuzzInputFile file(data, size_bytes);
  try {
    (void)mpitrain::checkpoint::read_safetensors(file.path());
  } catch (const mpitrain::checkpoint::CheckpointError&) {
    // The documented rejection of a malformed file.
  }
  return 0;
}
