#include "previous_run.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;

class PreviousRun : public ::testing::Test {
 protected:
  void touch(const fs::path& relative, const std::string& text = "x") {
    fs::create_directories((dir_ / relative).parent_path());
    std::ofstream(dir_ / relative) << text;
  }
  const test_support::TempDir temp_{"previous_run"};
  const fs::path dir_ = temp_.path();
};

TEST_F(PreviousRun, AFolderWithoutMetricsOrCommittedCheckpointsHoldsNoRun) {
  EXPECT_TRUE(previous_run_files(dir_ / "missing").empty());
  EXPECT_TRUE(previous_run_files(dir_).empty());
  touch("metrics.jsonl", "");                                  // empty: nothing was logged
  touch("checkpoints/checkpoint_3/state.h5");                  // no manifest: never loaded
  touch("checkpoints/checkpoint_4.tmp-0123456789abcdef/MANIFEST.json");
  touch("notes.txt");
  EXPECT_TRUE(previous_run_files(dir_).empty());
}

TEST_F(PreviousRun, NamesMetricsAndCommittedCheckpointsAndOverwriteRemovesOnlyThem) {
  touch("metrics.jsonl", "{}\n");
  touch("checkpoints/checkpoint_0/MANIFEST.json");
  touch("checkpoints/step_40/MANIFEST.json");
  touch("model.h5");
  touch("notes.txt");
  EXPECT_EQ(previous_run_files(dir_),
            (std::vector<std::string>{"metrics.jsonl", "checkpoints/checkpoint_0", "checkpoints/step_40"}));
  TrainConfig config = load_config("", {"project.dir=" + dir_.string()});
  EXPECT_EQ(previous_run_message(config, previous_run_files(dir_)),
            "--set project.dir=" + dir_.string() + ": project.dir: " + dir_.string() +
                " holds another run (metrics.jsonl, checkpoints/checkpoint_0, checkpoints/step_40); a fresh run "
                "would mix with it. To continue that run, set project.resume: latest; to start a new one, "
                "choose another project.dir, or set project.overwrite: true to remove that run's metrics.jsonl, "
                "checkpoints and model files first");
  EXPECT_EQ(remove_previous_run(dir_), (std::vector<std::string>{"metrics.jsonl", "checkpoints", "model.h5"}));
  EXPECT_TRUE(previous_run_files(dir_).empty());
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt")) << "files that are not the run's stay";
}

}  // namespace
}  // namespace mpitrain::app
