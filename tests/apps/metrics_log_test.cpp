#include "metrics_log.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mpitrain::app {
namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(MetricsLog, WritesTheContractKeysOneObjectPerLineAndAppends) {
  const auto path = (std::filesystem::temp_directory_path() /
                     ("mpitrain_metrics_" + std::to_string(::getpid()) + ".jsonl"))
                        .string();
  std::filesystem::remove(path);
  {
    MetricsLog log(path);
    log.write(TrainMetrics{50, 0, 0.5, 1e-3, std::nan(""), 65536.0, 2, 1234.5, 3.25});
  }
  {
    MetricsLog log(path);  // a resumed run appends
    log.write(EvalMetrics{100, 1, 0.25, 0.875, 10000});
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  const auto& t = lines[0];
  for (const char* key : {"step", "epoch", "loss", "lr", "grad_norm", "loss_scale",
                          "skipped_steps", "samples_per_s", "time_s"}) {
    EXPECT_TRUE(t.contains(key)) << key;
  }
  EXPECT_EQ(t.size(), 9u);
  EXPECT_EQ(t["step"], 50);
  EXPECT_DOUBLE_EQ(t["loss"].get<double>(), 0.5);
  EXPECT_TRUE(t["grad_norm"].is_null()) << "NaN is written as null";
  EXPECT_EQ(t["skipped_steps"], 2);
  const auto& e = lines[1];
  EXPECT_EQ(e.size(), 6u);
  EXPECT_EQ(e["eval"], true);
  EXPECT_EQ(e["samples"], 10000);
  EXPECT_DOUBLE_EQ(e["accuracy"].get<double>(), 0.875);
  std::filesystem::remove(path);
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
