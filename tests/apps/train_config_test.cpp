#include "train_config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "config_schema.hpp"
#include "temp_dir.hpp"

namespace mpitrain::app {
namespace {

// Each test writes its YAML files into a temporary folder of its own, removed at its end.
class TrainConfigTest : public ::testing::Test {
 protected:
  // Returns the path of a new file in the test's folder holding `text`.
  std::string write_yaml(const std::string& text) {
    const std::string file = dir_.file("config_" + std::to_string(files_++) + ".yaml");
    std::ofstream(file) << text;
    return file;
  }

 private:
  const test_support::TempDir dir_{"train_config"};
  int files_ = 0;
};

// Returns the ConfigError message of load_config, or "" when it did not throw.
std::string error_of(const std::string& path, const std::vector<std::string>& sets = {}) {
  try {
    load_config(path, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_F(TrainConfigTest, DefaultsMatchTheDesignContract) {
  const TrainConfig c = load_config("", {});
  EXPECT_EQ(c.seed, 0);
  EXPECT_EQ(c.model.kind, "mlp");
  EXPECT_EQ(c.model.mlp.hidden, (std::vector<std::int64_t>{256, 256}));
  EXPECT_EQ(c.model.mlp.activation, "relu");
  EXPECT_EQ(c.data.kind, "idx");
  EXPECT_EQ(*c.data.train.images, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  EXPECT_EQ(*c.data.test.labels, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(c.data.batch_size, 64);
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_FALSE(c.data.drop_last);
  EXPECT_FALSE(c.data.split_batches);
  EXPECT_TRUE(c.data.even_batches);
  EXPECT_EQ(c.optimizer.kind, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1.0e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.9, 0.999}));
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1.0e-8);
  EXPECT_EQ(c.scheduler.kind, "constant");
  EXPECT_EQ(c.training.epochs, 1);
  EXPECT_FALSE(c.training.max_steps.has_value());
  EXPECT_EQ(c.training.gradient_accumulation_steps, 1);
  EXPECT_FALSE(c.training.max_grad_norm.has_value());
  EXPECT_EQ(c.training.mixed_precision, "no");
  EXPECT_EQ(c.training.nan_policy, "error");
  EXPECT_EQ(c.training.log_every, 50);
  EXPECT_DOUBLE_EQ(c.distributed.bucket_cap_mb, 25.0);
  EXPECT_DOUBLE_EQ(c.distributed.first_bucket_mb, 1.0);
  EXPECT_TRUE(c.distributed.overlap);
  EXPECT_EQ(c.distributed.grad_comm_dtype, "fp32");
  EXPECT_EQ(c.distributed.zero_stage, 0);
  EXPECT_DOUBLE_EQ(c.distributed.timeout_s, 600.0);
  EXPECT_EQ(c.project.dir, "runs/default");
  EXPECT_TRUE(c.project.automatic_checkpoint_naming);
  EXPECT_FALSE(c.project.total_limit.has_value());
  EXPECT_EQ(c.project.resume, "none");
}

TEST_F(TrainConfigTest, PrintConfigIsValidYamlThatLoadsToTheDefaults) {
  const std::string text = default_config_yaml();
  EXPECT_NE(text.find("# "), std::string::npos) << "print-config must be commented";
  const TrainConfig from_text = load_config(write_yaml(text), {});
  EXPECT_EQ(from_text.yaml, load_config("", {}).yaml);
}

TEST_F(TrainConfigTest, FileValuesAndOverridesApplyInOrder) {
  const std::string path = write_yaml(
      "seed: 7\nmodel: {hidden: [32]}\ntraining:\n  epochs: 3\n  mixed_precision: bf16\n");
  const TrainConfig c = load_config(path, {"training.epochs=5", "optimizer.betas=[0.8, 0.9]",
                                           "training.max_grad_norm=1.5", "model.hidden=[8, 4]"});
  EXPECT_EQ(c.seed, 7);
  EXPECT_EQ(c.training.epochs, 5);
  EXPECT_EQ(c.training.mixed_precision, "bf16");
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.8, 0.9}));
  EXPECT_DOUBLE_EQ(*c.training.max_grad_norm, 1.5);
  EXPECT_EQ(c.model.mlp.hidden, (std::vector<std::int64_t>{8, 4}));
}

TEST_F(TrainConfigTest, UnknownKeyNamesFileLineAndSuggests) {
  const std::string path = write_yaml("seed: 1\noptimiser:\n  lr: 0.1\n");
  const std::string msg = error_of(path);
  EXPECT_NE(msg.find(path + ":2:1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'optimiser'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'optimizer'"), std::string::npos) << msg;

  const std::string nested = error_of(write_yaml("training:\n  epoch: 2\n"));
  EXPECT_NE(nested.find(":2:3"), std::string::npos) << nested;
  EXPECT_NE(nested.find("did you mean 'training.epochs'"), std::string::npos) << nested;
}

TEST_F(TrainConfigTest, WrongTypesAndRangesNameTheKeyAndLine) {
  const std::string path = write_yaml("data:\n  batch_size: many\n");
  const std::string msg = error_of(path);
  EXPECT_NE(msg.find(path + ":2:15"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.batch_size: expected an integer >= 1, got 'many'"), std::string::npos)
      << msg;
  EXPECT_NE(error_of(write_yaml("data: {batch_size: 0}\n")).find("data.batch_size"),
            std::string::npos);
  EXPECT_NE(error_of(write_yaml("model: {dropout: 1.0}\n")).find("in [0, 1)"), std::string::npos);
  EXPECT_NE(error_of(write_yaml("optimizer: {kind: lamb}\n")).find("expected one of adamw, sgd"),
            std::string::npos);
  EXPECT_NE(error_of(write_yaml("optimizer: {betas: [0.9]}\n")).find("list of 2 numbers"),
            std::string::npos);
  EXPECT_NE(error_of(write_yaml("data: {shuffle: maybe}\n")).find("expected true or false"),
            std::string::npos);
  EXPECT_NE(error_of(write_yaml("training: {epochs: null}\n")).find("may not be null"),
            std::string::npos);
  EXPECT_NE(error_of(write_yaml("seed: [1, 2]\n")).find("got a list"), std::string::npos);
  const std::string stage = write_yaml("distributed:\n  zero_stage: 2\n");
  const std::string stage_msg = error_of(stage);
  EXPECT_NE(stage_msg.find(stage + ":2:15"), std::string::npos) << stage_msg;
  EXPECT_NE(stage_msg.find("distributed.zero_stage"), std::string::npos) << stage_msg;
  EXPECT_EQ(load_config(write_yaml("distributed: {zero_stage: 1}\n"), {}).distributed.zero_stage, 1);
}

TEST_F(TrainConfigTest, OverrideErrorsNameTheOverride) {
  EXPECT_NE(error_of("", {"training.epochz=3"}).find("did you mean 'training.epochs'"),
            std::string::npos);
  EXPECT_NE(error_of("", {"training.epochs=abc"}).find("--set training.epochs=abc"),
            std::string::npos);
  EXPECT_NE(error_of("", {"training"}).find("expected key.path=value"), std::string::npos);
  EXPECT_NE(error_of("", {"training=3"}).find("is a section"), std::string::npos);
}

TEST_F(TrainConfigTest, CrossKeyChecks) {
  EXPECT_NE(error_of("", {"optimizer.kind=sgd", "optimizer.nesterov=true"}).find("momentum > 0"),
            std::string::npos);
  EXPECT_NE(error_of("", {"data.kind=hdf5"}).find("hdf5 data needs file"), std::string::npos);
  EXPECT_NE(error_of(write_yaml("seed: [")).find("YAML syntax error"), std::string::npos);
  EXPECT_NE(error_of("/nonexistent/run.yaml").find("cannot open"), std::string::npos);
}

TEST_F(TrainConfigTest, TotalLimitNeedsAutomaticNamingNamingTheLine) {
  const std::string path =
      write_yaml("project:\n  automatic_checkpoint_naming: false\n  total_limit: 3\n");
  const std::string msg = error_of(path);
  EXPECT_NE(msg.find(path + ":3:16: project.total_limit: needs project.automatic_checkpoint_naming: true"),
            std::string::npos)
      << msg;
  const std::string set = error_of("", {"project.automatic_checkpoint_naming=false", "project.total_limit=2"});
  EXPECT_NE(set.find("--set project.total_limit=2: project.total_limit"), std::string::npos) << set;
  EXPECT_EQ(error_of("", {"project.automatic_checkpoint_naming=false"}), "");
  EXPECT_EQ(error_of("", {"project.total_limit=2"}), "");
}

TEST_F(TrainConfigTest, OriginsNameWhereEachKeyWasSet) {
  const std::string path = write_yaml("seed: 1\nproject:\n  resume: latest\n");
  const TrainConfig c = load_config(path, {"training.epochs=3", "seed=2"});
  EXPECT_EQ(c.origin("project.resume"), path + ":3:11");
  EXPECT_EQ(c.origin("training.epochs"), "--set training.epochs=3");
  EXPECT_EQ(c.origin("seed"), "--set seed=2");  // the last setting wins
  EXPECT_EQ(c.origin("project.dir"), path);      // a default: the file
  EXPECT_EQ(load_config("", {}).origin("project.dir"), "config");
}

TEST_F(TrainConfigTest, EffectiveYamlRoundTrips) {
  const TrainConfig c = load_config("", {"training.max_steps=10", "project.resume=latest"});
  const TrainConfig again = load_config(write_yaml(c.yaml), {});
  EXPECT_EQ(again.yaml, c.yaml);
  EXPECT_EQ(*again.training.max_steps, 10);
  EXPECT_EQ(again.project.resume, "latest");
  EXPECT_EQ(again.training.mixed_precision, "no");
}

// Numbers come back in their shortest exact form, not yaml-cpp's 17 digits, and an exponent
// has a ".0" before it, so that PyYAML reads a number too; the values are the same doubles.
TEST_F(TrainConfigTest, NumbersAreWrittenInTheirShortestExactForm) {
  const TrainConfig c = load_config("", {"optimizer.lr=3e-4", "optimizer.eps=1e-5",
                                         "optimizer.betas=[0.9, 0.95]", "distributed.bucket_cap_mb=0.1"});
  EXPECT_NE(c.yaml.find("  lr: 0.0003\n"), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("  eps: 1.0e-05\n"), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("  betas: [0.9, 0.95]\n"), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("  bucket_cap_mb: 0.1\n"), std::string::npos) << c.yaml;
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.eps, 1e-5);
  EXPECT_EQ(c.optimizer.betas.at(1), 0.95);
  const TrainConfig again = load_config(write_yaml(c.yaml), {});
  EXPECT_EQ(again.optimizer.lr, 3e-4);
  EXPECT_EQ(again.optimizer.eps, 1e-5);
  EXPECT_EQ(again.yaml, c.yaml);
}

// YAML forbids a key twice in one mapping; yaml-cpp would keep the later without a word.
TEST_F(TrainConfigTest, AKeyGivenTwiceNamesBothPlaces) {
  const std::string path = write_yaml("training:\n  epochs: 2\n  epochs: 3\n");
  EXPECT_EQ(error_of(path), path + ":3:3: 'training.epochs' is given twice in the same mapping (first at " +
                                path + ":2:3); keep one");
  const std::string sections = write_yaml("training: {epochs: 2}\nseed: 1\ntraining: {log_every: 3}\n");
  EXPECT_EQ(error_of(sections), sections + ":3:1: 'training' is given twice in the same mapping (first at " +
                                    sections + ":1:1); keep one");
  EXPECT_EQ(error_of(write_yaml("training: {epochs: 2}\nproject: {dir: a}\n")), "");
}

// Bucket sizes are checked when the config is read (exit 2 with the key's place), not when
// the engine is built: 0 or an absurd size used to end the run with exit 1.
TEST_F(TrainConfigTest, BucketSizesMustBePositiveAndBounded) {
  for (const char* key : {"distributed.bucket_cap_mb", "distributed.first_bucket_mb"}) {
    for (const char* value : {"0", "-1", "1e300", ".inf"}) {
      const std::string set = std::string(key) + "=" + value;
      EXPECT_NE(error_of("", {set}).find("--set " + set + ": " + key + ": expected a value in (0, 1048576], got '" +
                                         value + "'"),
                std::string::npos)
          << error_of("", {set});
    }
    EXPECT_EQ(error_of("", {std::string(key) + "=1048576"}), "");
    EXPECT_EQ(error_of("", {std::string(key) + "=0.001"}), "");
  }
}

TEST(ConfigSchema, ClosestName) {
  const std::vector<std::string> names = {"epochs", "eval", "log_every"};
  EXPECT_EQ(closest_name("epoch", names), "epochs");
  EXPECT_EQ(closest_name("zzzzzzzz", names), "");
}

}  // namespace
}  // namespace mpitrain::app
