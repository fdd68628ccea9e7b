#include "training_run.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "mpitrain/collectives/mpi_runtime.hpp"
#include "temp_dir.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;

// Returns everything written to `file` (a std::tmpfile).
std::string contents(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) text.push_back(static_cast<char>(c));
  return text;
}

// Messages used to be formatted into a 512-byte buffer, which cut a long project.dir short:
// the save and the final line must show the whole path.
TEST(TrainingRun, LongProjectDirAppearsWholeInTheMessages) {
  MpiRuntime runtime;
  Communicator comm(runtime);
  const test_support::TempDir base("training_run");
  fs::path dir = base.path();
  for (char c : {'a', 'b', 'c'}) dir /= std::string(200, c);  // 600+ characters, each name < NAME_MAX
  ASSERT_GT(dir.string().size(), 600u);
  const TrainConfig config = load_config(
      "", {"data.kind=synthetic", "data.synthetic.train_size=64", "data.synthetic.test_size=16",
           "data.synthetic.features=4", "data.synthetic.classes=2", "data.batch_size=16", "model.hidden=[4]",
           "project.dir=" + dir.string()});
  StopSignal stop;
  Watchdog watchdog(0.0, comm.rank(), [](const std::string&) {});
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  Log log(comm.rank(), LogLevel::info, out, out);
  const TrainingOutcome outcome = run_training(config, comm, stop, watchdog, log);
  const std::string text = contents(out);
  std::fclose(out);

  EXPECT_EQ(outcome.steps, 4);
  const std::string saved = (dir / "checkpoints" / "checkpoint_0").string();
  EXPECT_EQ(outcome.last_checkpoint, saved);
  EXPECT_NE(text.find("step 4: saved " + saved + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("; weights in " + dir.string()), std::string::npos) << text;
  EXPECT_NE(text.find("epoch 0: test accuracy "), std::string::npos) << text;
}

}  // namespace
}  // namespace mpitrain::app
