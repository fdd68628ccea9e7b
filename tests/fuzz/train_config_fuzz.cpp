// Fuzzes the trainer's config loader (apps/train_config.cpp): the input is a YAML file. Every
// malformed file must end in ConfigError (which names the key and file:line); a crash, a
// leak, undefined behaviour, or any other exception escaping (a raw YAML::Exception, a
// std::bad_alloc) is a finding.

#include <cstddef>
#include <cstdint>

#include "fuzz_input_file.hpp"
#include "train_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size_bytes) {
  const mpitrain::fuzz::FuzzInputFile file(data, size_bytes);
  try {
    (void)mpitrain::app::load_config(file.path(), {});
  } catch (const mpitrain::app::ConfigError&) {
    // The documented rejection of a malformed config.
  }
  return 0;
}
