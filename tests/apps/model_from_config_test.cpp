#include "model_from_config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpitrain/data/data_loader.hpp"

namespace mpitrain::app {
namespace {

// Returns the ConfigError message of make_model, or "" when it did not throw.
std::string error_of(const TrainConfig& config) {
  try {
    make_model(config, 784, 10);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelFromConfig, DefaultMlpHasTorchNamesAndShapes) {
  const TrainConfig config = load_config("", {});
  Model model = make_model(config, 784, 10);
  ASSERT_NE(model.module, nullptr);
  ASSERT_NE(model.objective, nullptr);
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (nn::Parameter* p : model.module->parameters()) {
    names.push_back(p->name);
    shapes.push_back(p->value.shape());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}));
  EXPECT_EQ(shapes, (std::vector<Shape>{{256, 784}, {256}, {256, 256}, {256}, {10, 256}, {10}}));
}

TEST(ModelFromConfig, MlpKeysShapeTheModel) {
  const TrainConfig config = load_config("", {"model.hidden=[8]", "model.dropout=0.25", "model.activation=gelu"});
  Model model = make_model(config, 5, 3);
  std::vector<std::string> names;
  for (nn::Parameter* p : model.module->parameters()) names.push_back(p->name);
  // Linear, GELU, Dropout, Linear.
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias"}));
}

TEST(ModelFromConfig, SameSeedSameWeights) {
  const TrainConfig config = load_config("", {"model.hidden=[4]", "seed=7"});
  Model a = make_model(config, 3, 2);
  Model b = make_model(config, 3, 2);
  const auto pa = a.module->parameters();
  const auto pb = b.module->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const Tensor& x = pa[i]->value;
    const Tensor& y = pb[i]->value;
    ASSERT_EQ(x.numel(), y.numel());
    for (std::size_t k = 0; k < x.numel(); ++k) EXPECT_EQ(x.data()[k], y.data()[k]) << pa[i]->name;
  }
}

TEST(ModelFromConfig, UnknownKindIsAnErrorNamingTheKey) {
  TrainConfig config = load_config("", {});
  config.model.kind = "resnet";
  const std::string message = error_of(config);
  EXPECT_NE(message.find("model.kind"), std::string::npos) << message;
  EXPECT_NE(message.find("resnet"), std::string::npos) << message;
}

TEST(ModelFromConfig, RefusedSettingIsAConfigErrorNamingTheModel) {
  TrainConfig config = load_config("", {});
  config.model.mlp.hidden = {0};
  const std::string message = error_of(config);
  EXPECT_EQ(message.rfind("model: ", 0), 0u) << message;
}

TEST(ModelFromConfig, MlpObjectiveIsCrossEntropyJudgedByAccuracy) {
  const TrainConfig config = load_config("", {});
  const Model model = make_model(config, 784, 10);
  // Two examples, three classes: the first is right (class 2), the second wrong.
  data::Batch batch;
  batch.labels = {2, 0};
  batch.real_count = 2;
  Tensor logits({2, 3});
  const float values[] = {0.0f, 1.0f, 3.0f, 0.0f, 2.0f, 1.0f};
  std::copy(std::begin(values), std::end(values), logits.data());
  std::vector<float> rows;
  model.objective->score(logits, batch, rows);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1], 1.0f);
  EXPECT_EQ(rows[3], 0.0f);
  Tensor grad;
  const float loss = model.objective->loss(logits, batch, grad);
  // The training loss is the mean of the per-example evaluation losses.
  EXPECT_NEAR(loss, (rows[0] + rows[2]) / 2.0f, 1e-6f);
  EXPECT_EQ(grad.shape(), logits.shape());
  EXPECT_EQ(model.objective->describe_metric(0.886849), "accuracy 88.68%");
}

}  // namespace
}  // namespace mpitrain::app
