#include "mpitrain/checkpoint/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/durable_io.hpp"

namespace mpitrain::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; this writer copies memory as is");

constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{100} << 20;  // the reference limit
constexpr std::string_view kMetadataKey = "__metadata__";

[[noreturn]] void bad(const std::filesystem::path& file, const std::string& what) {
  throw CheckpointError("safetensors file '" + file.string() + "': " + what);
}

std::span<const unsigned char> bytes_of(const void* p, std::size_t n) {
  return {static_cast<const unsigned char*>(p), n};
}

}  // namespace

void write_safetensors(const std::filesystem::path& file,
                       std::span<const NamedTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<NamedTensor> sorted(tensors.begin(), tensors.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; });
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].name == kMetadataKey || sorted[i].name.empty()) {
      bad(file, "invalid tensor name '" + sorted[i].name + "'");
    }
    if (i > 0 && sorted[i].name == sorted[i - 1].name) {
      bad(file, "duplicate tensor name '" + sorted[i].name + "'");
    }
    if (sorted[i].tensor == nullptr) bad(file, "tensor '" + sorted[i].name + "' is null");
  }

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : sorted) {
    const std::uint64_t bytes = tensor->numel() * sizeof(float);
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = "F32";
    entry["shape"] = tensor->shape();
    entry["data_offsets"] = {offset, offset + bytes};
    header[name] = std::move(entry);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t length = text.size();

  DurableFileWriter writer(file);
  writer.write(bytes_of(&length, sizeof length));
  writer.write(bytes_of(text.data(), text.size()));
  for (const auto& [name, tensor] : sorted) {
    writer.write(bytes_of(tensor->data(), tensor->numel() * sizeof(float)));
  }
  writer.finish();
}

SafetensorsContents read_safetensors(const std::filesystem::path& file) {
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    bad(file, std::string("cannot be opened: ") +
                  (errno != 0 ? std::strerror(errno) : "unknown cause"));
  }
  in.seekg(0, std::ios::end);
  const std::uint64_t file_bytes = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  std::uint64_t length = 0;
  if (file_bytes < 8 || !in.read(reinterpret_cast<char*>(&length), sizeof length)) {
    bad(file, "shorter than the 8-byte header length");
  }
  if (length > kMaxHeaderBytes || length > file_bytes - 8) {
    bad(file, "header length " + std::to_string(length) + " exceeds the file (" +
                  std::to_string(file_bytes) + " bytes) or the 100 MiB limit");
  }
  std::string text(length, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(length))) bad(file, "header unreadable");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) bad(file, "header is not a JSON object");

  const std::uint64_t data_bytes = file_bytes - 8 - length;
  SafetensorsContents out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) bad(file, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) bad(file, "__metadata__[\"" + k + "\"] is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const auto where = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      bad(file, where + " lacks dtype, shape or data_offsets");
    }
    if (entry["dtype"] != "F32") bad(file, where + " has dtype " + entry["dtype"].dump() + ", not F32");
    Shape shape;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) bad(file, where + " has a shape entry that is not a count");
      shape.push_back(d.get<std::size_t>());
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      bad(file, where + " has malformed data_offsets");
    }
    const std::uint64_t begin = offsets[0].get<std::uint64_t>();
    const std::uint64_t end = offsets[1].get<std::uint64_t>();
    if (begin > end || end > data_bytes) bad(file, where + " has data_offsets beyond the data");
    std::uint64_t count = 1;
    for (const std::size_t d : shape) {
      if (d != 0 && count > (std::uint64_t{1} << 62) / d) bad(file, where + " shape overflows");
      count *= d;
    }
    if (end - begin != count * sizeof(float)) {
      bad(file, where + " covers " + std::to_string(end - begin) + " bytes, shape " +
                    mpitrain::to_string(shape) + " needs " + std::to_string(count * sizeof(float)));
    }
    ranges.emplace_back(begin, end);
    Tensor tensor(shape);
    in.seekg(static_cast<std::streamoff>(8 + length + begin));
    if (count > 0 && !in.read(reinterpret_cast<char*>(tensor.data()),
                              static_cast<std::streamsize>(count * sizeof(float)))) {
      bad(file, where + " data unreadable");
    }
    out.tensors.emplace(name, std::move(tensor));
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered) bad(file, "tensor data has a gap or an overlap at byte " + std::to_string(begin));
    covered = end;
  }
  if (covered != data_bytes) bad(file, "data has " + std::to_string(data_bytes - covered) + " bytes no tensor covers");
  return out;
}

}  // namespace mpitrain::checkpoint
