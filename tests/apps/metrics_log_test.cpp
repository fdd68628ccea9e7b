#include "metrics_log.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace mpitrain::app {
namespace {

std::vector<nlohmann::ordered_json> read_lines(const std::string& path) {
  std::vector<nlohmann::ordered_json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::ordered_json::parse(line));
  return lines;
}

TEST(MetricsLog, WritesTheContractKeysOneObjectPerLineAndAppends) {
  const test_support::TempDir dir("metrics_log");
  const std::string path = dir.file("metrics.jsonl");
  {
    MetricsLog log(path);
    log.write(TrainMetrics{50, 0, 0.5, 1e-3, std::nan(""), 65536.0, 2, 1234.5, 3.25});
  }
  {
    MetricsLog log(path);  // a resumed run appends
    log.write(EvalMetrics{100, 1, 0.25, 0.875, 10000});
    log.write(RunHeader{"20261124T235520Z-0000abcd", "2026-11-24T23:55:20Z", "0.1.0", 2, "00ff"});
    log.write(ResumeMarker{50, 0, "runs/x/checkpoints/checkpoint_0"});
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4u);
  const auto& t = lines[0];
  for (const char* key : {"step", "epoch", "loss", "lr", "grad_norm", "loss_scale",
                          "skipped_steps", "samples_per_s", "time_s"}) {
    EXPECT_TRUE(t.contains(key)) << key;
  }
  EXPECT_EQ(t.size(), 10u);
  // wall_time: seconds since the Unix epoch, now (after 2020, before 2100).
  EXPECT_GT(t["wall_time"].get<double>(), 1.58e9);
  EXPECT_LT(t["wall_time"].get<double>(), 4.1e9);
  EXPECT_EQ(t["step"], 50);
  EXPECT_DOUBLE_EQ(t["loss"].get<double>(), 0.5);
  EXPECT_TRUE(t["grad_norm"].is_null()) << "NaN is written as null";
  EXPECT_EQ(t["skipped_steps"], 2);
  const auto& e = lines[1];
  EXPECT_EQ(e.size(), 7u);
  EXPECT_TRUE(e.contains("wall_time"));
  EXPECT_EQ(e["eval"], true);
  EXPECT_EQ(e["samples"], 10000);
  EXPECT_DOUBLE_EQ(e["accuracy"].get<double>(), 0.875);
  std::vector<std::string> keys;
  for (const auto& item : lines[2].items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"header", "run_id", "start_time", "mpitrain_version", "world_size",
                                            "config_hash", "wall_time"}));
  EXPECT_EQ(lines[2]["run_id"], "20261124T235520Z-0000abcd");
  EXPECT_EQ(lines[2]["world_size"], 2);
  keys.clear();
  for (const auto& item : lines[3].items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"resumed", "step", "epoch", "checkpoint", "wall_time"}));
  EXPECT_EQ(lines[3]["step"], 50);
}

TEST(MetricsLog, RunIdsAreUniqueAndStartWithTheUtcTime) {
  const std::string a = new_run_id(), b = new_run_id();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 25u) << a;  // 20261124T235520Z-1a2b3c4d
  EXPECT_EQ(a[8], 'T');
  EXPECT_EQ(a[15], 'Z');
  EXPECT_EQ(a[16], '-');
  const std::string now = utc_now_iso8601();
  ASSERT_EQ(now.size(), 20u) << now;  // 2026-11-24T23:55:20Z
  EXPECT_EQ(now.substr(0, 4), a.substr(0, 4));
}

TEST(MetricsLog, UnwritablePathNamesThePath) {
  try {
    MetricsLog log("/nonexistent-dir/metrics.jsonl");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/metrics.jsonl"), std::string::npos);
  }
}

}  // namespace
}  // namespace mpitrain::app
