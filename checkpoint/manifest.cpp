#include "mpitrain/checkpoint/manifest.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/durable_io.hpp"

namespace mpitrain::checkpoint {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Manifests are a few hundred bytes per rank; anything far larger is not ours.
constexpr std::size_t kMaxManifestBytes = std::size_t{16} << 20;

[[noreturn]] void bad(const std::string& source, std::string_view what) {
  throw CheckpointError("manifest '" + source + "': " + std::string(what));
}

std::int64_t get_int(const OrderedJson& obj, const char* key, const std::string& source) {
  const auto it = obj.find(key);
  if (it == obj.end()) bad(source, std::string("missing key \"") + key + "\"");
  if (!it->is_number_integer()) bad(source, std::string("key \"") + key + "\" is not an integer");
  return it->get<std::int64_t>();
}

bool is_hex_digest(const std::string& s) {
  if (s.size() != 32) return false;
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

std::string to_json(const Manifest& m) {
  OrderedJson files = OrderedJson::object();
  for (const auto& [name, digest] : m.files) {
    OrderedJson entry = OrderedJson::object();
    entry["bytes"] = digest.bytes;
    entry["xxh3_128"] = digest.xxh3_128;
    files[name] = std::move(entry);
  }
  OrderedJson j = OrderedJson::object();
  j["format_version"] = m.format_version;
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["world_size"] = m.world_size;
  if (m.zero_stage != 0) j["zero_stage"] = m.zero_stage;  // stage 0 manifests stay as they were
  j["created"] = m.created;
  j["files"] = std::move(files);
  return j.dump(2) + "\n";
}

Manifest parse_manifest(std::string_view text, const std::string& source) {
  OrderedJson j;
  try {
    j = OrderedJson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad(source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(source, "top level is not a JSON object");
  Manifest m;
  m.format_version = get_int(j, "format_version", source);
  if (m.format_version < 1 || m.format_version > kFormatVersion) {
    bad(source, "format_version " + std::to_string(m.format_version) +
                    " is not supported (this mpitrain reads 1 to " +
                    std::to_string(kFormatVersion) + ")");
  }
  m.step = get_int(j, "step", source);
  m.epoch = get_int(j, "epoch", source);
  m.world_size = get_int(j, "world_size", source);
  if (m.world_size < 1 || m.world_size > (std::int64_t{1} << 24)) {
    bad(source, "world_size " + std::to_string(m.world_size) + " is out of range");
  }
  if (j.contains("zero_stage")) {
    m.zero_stage = get_int(j, "zero_stage", source);
    if (m.zero_stage != 0 && m.zero_stage != 1) {
      bad(source, "zero_stage " + std::to_string(m.zero_stage) + " is not 0 or 1");
    }
  }
  const auto created = j.find("created");
  if (created == j.end() || !created->is_string()) bad(source, "key \"created\" is not a string");
  m.created = created->get<std::string>();
  const auto files = j.find("files");
  if (files == j.end() || !files->is_object()) bad(source, "key \"files\" is not an object");
  for (const auto& [name, entry] : files->items()) {
    if (!is_plain_file_name(name)) bad(source, "file name \"" + name + "\" is not a plain name");
    if (!entry.is_object()) bad(source, "files[\"" + name + "\"] is not an object");
    const auto bytes = entry.find("bytes");
    if (bytes == entry.end() || !bytes->is_number_unsigned()) {
      bad(source, "files[\"" + name + "\"].bytes is not a non-negative integer");
    }
    const auto hash = entry.find("xxh3_128");
    if (hash == entry.end() || !hash->is_string() || !is_hex_digest(hash->get<std::string>())) {
      bad(source, "files[\"" + name + "\"].xxh3_128 is not 32 lowercase hex digits");
    }
    m.files[name] = FileDigest{bytes->get<std::uint64_t>(), hash->get<std::string>()};
  }
  if (!m.files.contains(std::string(kStateFile))) {
    bad(source, "\"files\" does not list " + std::string(kStateFile));
  }
  for (std::int64_t r = 0; r < m.world_size; ++r) {
    const std::string name = rank_file_name(static_cast<int>(r));
    if (!m.files.contains(name)) bad(source, "\"files\" does not list " + name);
  }
  return m;
}

Manifest read_manifest(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / kManifestFile;
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      throw CheckpointError("'" + dir.string() + "' has no " + std::string(kManifestFile) +
                            ": not a committed checkpoint");
    }
    throw CheckpointError("lstat '" + file.string() + "' failed: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) bad(file.string(), "is not a regular file");
  return parse_manifest(read_small_file(file, kMaxManifestBytes), file.string());
}

void write_manifest(const std::filesystem::path& dir, const Manifest& manifest) {
  write_file_durably(dir / kManifestFile, to_json(manifest));
}

Manifest verify_checkpoint(const std::filesystem::path& dir) {
  Manifest m = read_manifest(dir);
  // Sizes first: cheap, and they catch truncation without reading gigabytes.
  for (const auto& [name, digest] : m.files) {
    const std::filesystem::path file = dir / name;
    struct stat st {};
    if (::lstat(file.c_str(), &st) != 0) {
      throw CheckpointError("checkpoint file '" + file.string() + "' listed in " +
                            std::string(kManifestFile) + " is missing: " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
      throw CheckpointError("checkpoint file '" + file.string() + "' is not a regular file");
    }
    if (static_cast<std::uint64_t>(st.st_size) != digest.bytes) {
      throw CheckpointError("checkpoint file '" + file.string() + "' has " +
                            std::to_string(st.st_size) + " bytes, the manifest records " +
                            std::to_string(digest.bytes) + " (truncated or modified)");
    }
  }
  for (const auto& [name, digest] : m.files) {
    const std::filesystem::path file = dir / name;
    const FileDigest actual = hash_file(file);
    if (actual.bytes != digest.bytes || actual.xxh3_128 != digest.xxh3_128) {
      throw CheckpointError("checkpoint file '" + file.string() + "' is corrupted: XXH3-128 " +
                            actual.xxh3_128 + " over " + std::to_string(actual.bytes) +
                            " bytes, the manifest records " + digest.xxh3_128 + " over " +
                            std::to_string(digest.bytes) + " bytes");
    }
  }
  return m;
}

std::string utc_timestamp_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace mpitrain::checkpoint
