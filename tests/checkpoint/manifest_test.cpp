// MANIFEST.json: exact format, strict parsing, XXH3-128 hex form, and verification of a
// checkpoint folder (sizes and hashes) without MPI.

#include "mpitrain/checkpoint/manifest.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/file_hash.hpp"
#include "mpitrain/checkpoint/state_file.hpp"

namespace mpitrain::checkpoint {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::string hex_of(const std::string& s) {
  return xxh3_128_hex({reinterpret_cast<const unsigned char*>(s.data()), s.size()});
}

TEST(FileHash, HexIsHighThenLow64Bits) {
  // Known answer from xxHash's sanity tests: XXH3_128bits("", 0) =
  // {low64 0x6001C324468D497F, high64 0x99AA06D3014798D8}.
  EXPECT_EQ(hex_of(""), "99aa06d3014798d86001c324468d497f");
  TempDir dir("hash");
  const fs::path file = dir.path() / "f.bin";
  std::string content(3 * (std::size_t{8} << 20) + 12345, '\0');  // spans several read blocks
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 131 % 251);
  std::ofstream(file, std::ios::binary).write(content.data(), static_cast<std::streamsize>(content.size()));
  const FileDigest d = hash_file(file);
  EXPECT_EQ(d.bytes, content.size());
  EXPECT_EQ(d.xxh3_128, hex_of(content));  // streaming == one shot
}

Manifest sample() {
  Manifest m;
  m.format_version = 1;
  m.step = 120;
  m.epoch = 2;
  m.world_size = 2;
  m.created = "2024-05-01T12:34:56Z";
  m.files["state.h5"] = {4096, std::string(32, 'a')};
  m.files["rank_0.h5"] = {100, std::string(32, 'b')};
  m.files["rank_1.h5"] = {101, std::string(32, 'c')};
  return m;
}

TEST(Manifest, JsonHasContractKeysInOrder) {
  const std::string text = to_json(sample());
  const std::vector<std::string> keys = {"\"format_version\"", "\"step\"",    "\"epoch\"",
                                         "\"world_size\"",     "\"created\"", "\"files\""};
  std::size_t last = 0;
  for (const std::string& k : keys) {
    const std::size_t pos = text.find(k);
    ASSERT_NE(pos, std::string::npos) << k << " in " << text;
    EXPECT_GE(pos, last) << k << " out of order in " << text;
    last = pos;
  }
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j.size(), 6u);
  EXPECT_EQ(j["files"]["state.h5"]["bytes"], 4096);
  EXPECT_EQ(j["files"]["state.h5"]["xxh3_128"], std::string(32, 'a'));
  EXPECT_EQ(j["files"]["state.h5"].size(), 2u);

  const Manifest back = parse_manifest(text, "test");
  EXPECT_EQ(back.step, 120);
  EXPECT_EQ(back.epoch, 2);
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.created, "2024-05-01T12:34:56Z");
  EXPECT_EQ(back.files.size(), 3u);
  EXPECT_EQ(back.files.at("rank_1.h5").bytes, 101u);
}

TEST(Manifest, ZeroStageIsWrittenOnlyWhenTheOptimizerIsSharded) {
  EXPECT_EQ(to_json(sample()).find("zero_stage"), std::string::npos);  // stage 0: as before
  EXPECT_EQ(parse_manifest(to_json(sample()), "test").zero_stage, 0);
  Manifest m = sample();
  m.zero_stage = 1;
  const std::string text = to_json(m);
  EXPECT_LT(text.find("\"world_size\""), text.find("\"zero_stage\""));
  EXPECT_LT(text.find("\"zero_stage\""), text.find("\"created\""));
  EXPECT_EQ(parse_manifest(text, "test").zero_stage, 1);
  nlohmann::json j = nlohmann::json::parse(text);
  j["zero_stage"] = 3;
  try {
    (void)parse_manifest(j.dump(), "MANIFEST.json of test");
    ADD_FAILURE() << "accepted zero_stage 3";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_stage 3 is not 0 or 1"), std::string::npos) << e.what();
  }
}

TEST(Manifest, ParsingIsStrictAndNamesTheProblem) {
  const auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      (void)parse_manifest(text, "MANIFEST.json of test");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("MANIFEST.json of test"), std::string::npos);
    }
  };
  nlohmann::json good = nlohmann::json::parse(to_json(sample()));
  expect_error("{not json", "not valid JSON");
  expect_error("[]", "not a JSON object");
  auto j = good;
  j.erase("step");
  expect_error(j.dump(), "\"step\"");
  j = good;
  j["format_version"] = 2;
  expect_error(j.dump(), "format_version 2");
  j = good;
  j["files"].erase("rank_1.h5");
  expect_error(j.dump(), "rank_1.h5");
  j = good;
  j["files"]["../etc/passwd"] = {{"bytes", 1}, {"xxh3_128", std::string(32, '0')}};
  expect_error(j.dump(), "not a plain name");
  j = good;
  j["files"]["state.h5"]["xxh3_128"] = "XYZ";
  expect_error(j.dump(), "hex");
  j = good;
  j["files"]["state.h5"]["bytes"] = -1;
  expect_error(j.dump(), "bytes");
}

// Writes a world-size-1 checkpoint folder with the library's file writers.
void write_folder(const fs::path& dir) {
  fs::create_directories(dir);
  const CheckpointState state = testing::make_state(0, 3);
  write_state_file(dir / kStateFile, state, 1);
  write_rank_file(dir / rank_file_name(0), state.per_rank, 0, 1);
  Manifest m;
  m.format_version = kFormatVersion;
  m.world_size = 1;
  m.step = 3;
  m.created = utc_timestamp_now();
  m.files[std::string(kStateFile)] = hash_file(dir / kStateFile);
  m.files[rank_file_name(0)] = hash_file(dir / rank_file_name(0));
  write_manifest(dir, m);
}

TEST(Manifest, VerifyAcceptsIntactFolderAndNamesTheDamagedFile) {
  TempDir tmp("verify");
  const fs::path dir = tmp.path() / "checkpoint_0";
  write_folder(dir);
  EXPECT_EQ(verify_checkpoint(dir).step, 3);
  const fs::path state = dir / kStateFile;
  const std::string original = testing::read_file(state);

  const auto expect_error = [&](const std::string& needle) {
    try {
      (void)verify_checkpoint(dir);
      ADD_FAILURE() << "damage not detected";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const auto restore = [&] {
    std::ofstream(state, std::ios::binary | std::ios::trunc)
        .write(original.data(), static_cast<std::streamsize>(original.size()));
  };

  fs::resize_file(state, original.size() - 1);
  expect_error("state.h5' has " + std::to_string(original.size() - 1) + " bytes");
  restore();
  testing::flip_byte(state, original.size() / 2);
  expect_error("state.h5' is corrupted");
  restore();
  EXPECT_NO_THROW((void)verify_checkpoint(dir));
  fs::remove(dir / rank_file_name(0));
  expect_error("rank_0.h5' listed in MANIFEST.json is missing");
  fs::remove(dir / kManifestFile);
  expect_error("has no MANIFEST.json");
}

TEST(Manifest, TimestampIsIso8601Utc) {
  const std::string t = utc_timestamp_now();
  ASSERT_EQ(t.size(), 20u) << t;
  EXPECT_EQ(t[4], '-');
  EXPECT_EQ(t[10], 'T');
  EXPECT_EQ(t[19], 'Z');
}

}  // namespace
}  // namespace mpitrain::checkpoint
