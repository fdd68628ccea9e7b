#include "checkpoint_folders.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "temp_dir.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointFolders, StepFolderNames) {
  EXPECT_EQ(step_folder_name(0), "step_0");
  EXPECT_EQ(step_folder_name(1200), "step_1200");
  EXPECT_EQ(parse_step_folder_name("step_0"), 0);
  EXPECT_EQ(parse_step_folder_name("step_1200"), 1200);
  EXPECT_EQ(parse_step_folder_name("step_9223372036854775807"), INT64_MAX);
  for (const char* bad : {"step_", "step_01", "step_-1", "step_+1", "step_1a", "step_1.tmp-0123456789abcdef",
                          "step_9223372036854775808", "checkpoint_1", "Step_1"}) {
    EXPECT_FALSE(parse_step_folder_name(bad).has_value()) << bad;
  }
}

TEST(CheckpointFolders, ListsBothNamingsCommittedOnesInNumericOrder) {
  const test_support::TempDir temp("checkpoint_folders");
  const fs::path& dir = temp.path();
  for (const char* name : {"checkpoint_10", "checkpoint_9", "step_100", "step_20", "step_5",
                           "step_30.tmp-0123456789abcdef", "other"}) {
    fs::create_directories(dir / name);
  }
  for (const char* name : {"checkpoint_10", "checkpoint_9", "step_100", "step_20"}) {
    std::ofstream(dir / name / "MANIFEST.json") << "{}";
  }
  std::vector<std::string> names;
  for (const CheckpointFolder& f : committed_checkpoint_folders(dir)) names.push_back(f.dir.filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"checkpoint_9", "checkpoint_10", "step_20", "step_100"}));

  const std::vector<CheckpointFolder> steps = step_folders(dir);  // committed or not
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].number, 5);
  EXPECT_FALSE(steps[0].committed);
  EXPECT_EQ(steps[2].number, 100);
  EXPECT_TRUE(steps[2].committed);
  EXPECT_TRUE(step_folders(dir / "missing").empty());
}

}  // namespace
}  // namespace mpitrain::app
