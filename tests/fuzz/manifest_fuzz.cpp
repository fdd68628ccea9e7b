// Fuzzes the checkpoint manifest parser (checkpoint/manifest.cpp): the input is the text of
// a MANIFEST.json. Every malformed manifest must end in CheckpointError naming the source
// and the key; a crash, a leak, undefined behaviour or any other exception escaping (a raw
// nlohmann::json error) is a finding. A manifest that parses must print and parse back to
// the same manifest.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size_bytes) {
  const std::string_view text(reinterpret_cast<const char*>(data), size_bytes);
  try {
    const auto manifest = mpitrain::checkpoint::parse_manifest(text, "fuzz");
    const auto printed = mpitrain::checkpoint::to_json(manifest);
    const auto again = mpitrain::checkpoint::parse_manifest(printed, "fuzz (printed)");
    if (mpitrain::checkpoint::to_json(again) != printed) std::abort();
  } catch (const mpitrain::checkpoint::CheckpointError&) {
    // The documented rejection of a malformed manifest.
  }
  return 0;
}
