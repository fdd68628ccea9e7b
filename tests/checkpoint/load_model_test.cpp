// load_model: weights saved by save_model (.h5 and .safetensors) come back bit for bit into
// tensors of the same names and shapes; a missing, an extra or a mis-shaped tensor, a dtype
// other than F32, an unknown extension or a folder that is not a checkpoint are refused with
// exact messages naming the tensor, the file and both shapes, and leave the tensors as they
// were. (Checkpoint folders: tests/engine/model_weights_test.cpp.)

#include "mpitrain/checkpoint/load_model.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/safetensors.hpp"
#include "mpitrain/checkpoint/save_model.hpp"

namespace mpitrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::closed_form_tensor;
using testing::TempDir;

// A small model's weights: PyTorch names, torch shapes, distinct closed-form values.
std::map<std::string, Tensor> weights(float offset) {
  std::map<std::string, Tensor> w;
  w.emplace("0.weight", closed_form_tensor({4, 3}, 1.0f + offset));
  w.emplace("0.bias", closed_form_tensor({4}, 2.0f + offset));
  w.emplace("encoder/2.weight", closed_form_tensor({2, 4}, 3.0f + offset));
  w.emplace("norm.scale", closed_form_tensor({}, 5.0f + offset));
  return w;
}

std::vector<WeightsSlot> slots(std::map<std::string, Tensor>& w) {
  std::vector<WeightsSlot> out;
  for (auto& [name, tensor] : w) out.push_back({name, &tensor});
  return out;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)) == 0;
}

// Returns the CheckpointError message of load_model(path, into), or "" when it succeeds.
std::string load_error(const fs::path& path, std::map<std::string, Tensor>& into) {
  try {
    load_model(path, slots(into));
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

class LoadModel : public ::testing::TestWithParam<ModelFormat> {};

TEST_P(LoadModel, RoundTripsEveryTensorBitForBit) {
  TempDir dir("load_model_round_trip");
  const fs::path file = save_model(dir.path(), weights(0.0f), GetParam());
  std::map<std::string, Tensor> loaded = weights(100.0f);  // other values, same names and shapes
  load_model(file, slots(loaded));
  for (const auto& [name, tensor] : weights(0.0f)) {
    EXPECT_TRUE(same_values(loaded.at(name), tensor)) << name;
  }
  const std::map<std::string, Tensor> read = read_model(file);
  ASSERT_EQ(read.size(), 4u);
  EXPECT_TRUE(same_values(read.at("encoder/2.weight"), weights(0.0f).at("encoder/2.weight")));
}

TEST_P(LoadModel, AMisShapedTensorNamesTheTensorTheFileAndBothShapes) {
  TempDir dir("load_model_shape");
  const fs::path file = save_model(dir.path(), weights(0.0f), GetParam());
  std::map<std::string, Tensor> model = weights(100.0f);
  model["0.weight"] = closed_form_tensor({4, 5}, 7.0f);
  EXPECT_EQ(load_error(file, model), "load_model: tensor '0.weight' has shape [4, 3] in '" + file.string() +
                                          "', but [4, 5] in the model");
  // Nothing was copied: every check runs before the first copy.
  EXPECT_TRUE(same_values(model.at("0.bias"), weights(100.0f).at("0.bias")));
}

TEST_P(LoadModel, AMissingOrAnExtraTensorIsNamed) {
  TempDir dir("load_model_names");
  const fs::path file = save_model(dir.path(), weights(0.0f), GetParam());
  std::map<std::string, Tensor> more = weights(0.0f);
  more.emplace("4.bias", closed_form_tensor({2}, 9.0f));
  EXPECT_EQ(load_error(file, more),
            "load_model: tensor '4.bias' of the model is missing from '" + file.string() + "'");
  std::map<std::string, Tensor> fewer = weights(100.0f);
  fewer.erase("norm.scale");
  EXPECT_EQ(load_error(file, fewer),
            "load_model: '" + file.string() + "' holds tensor 'norm.scale' that the model does not have");
  EXPECT_TRUE(same_values(fewer.at("0.weight"), weights(100.0f).at("0.weight")));
}

INSTANTIATE_TEST_SUITE_P(Formats, LoadModel, ::testing::Values(ModelFormat::hdf5, ModelFormat::safetensors),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(LoadModelFiles, AnotherDtypeIsRefusedNamingTheTensor) {
  TempDir dir("load_model_dtype");
  const fs::path file = dir.path() / "half.safetensors";
  std::string header = R"({"0.bias":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::uint64_t length = header.size();
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(&length), sizeof length)
      .write(header.data(), static_cast<std::streamsize>(header.size()))
      .write("\0\0\0\0\0\0\0\0", 8);
  std::map<std::string, Tensor> model;
  model.emplace("0.bias", Tensor({4}));
  EXPECT_EQ(load_error(file, model),
            "safetensors file '" + file.string() + "': tensor '0.bias' has dtype \"F16\", not F32");
}

TEST(LoadModelFiles, UnknownPathsAreRefused) {
  TempDir dir("load_model_paths");
  std::map<std::string, Tensor> model = weights(0.0f);
  const fs::path pickle = dir.path() / "model.pt";
  std::ofstream(pickle) << "not ours";
  EXPECT_EQ(load_error(pickle, model), "load_model: '" + pickle.string() +
                                           "' is neither a .h5 nor a .safetensors file nor a checkpoint folder");
  EXPECT_EQ(load_error(dir.path(), model), "load_model: '" + dir.path().string() +
                                               "' is a folder without MANIFEST.json, not a committed checkpoint");
  EXPECT_EQ(load_error(dir.path() / "absent.h5", model),
            "load_model: '" + (dir.path() / "absent.h5").string() + "' does not exist");
}

TEST(LoadModelFiles, SafetensorsCarryPyTorchsFormatMetadata) {
  TempDir dir("load_model_metadata");
  const fs::path file = save_model(dir.path(), weights(0.0f), ModelFormat::safetensors);
  const SafetensorsContents contents = read_safetensors(file);
  EXPECT_EQ(contents.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(LoadModelFiles, SaveModelFileWritesExactlyThePathGiven) {
  TempDir dir("load_model_export");
  const std::map<std::string, Tensor> w = weights(0.0f);
  std::vector<NamedTensor> named;
  for (const auto& [name, tensor] : w) named.push_back({name, &tensor});
  const fs::path target = dir.path() / "sub" / "exported.safetensors";
  EXPECT_EQ(save_model_file(target, named, ModelFormat::safetensors), target);
  const std::map<std::string, Tensor> read = read_model(target);
  EXPECT_TRUE(same_values(read.at("0.weight"), w.at("0.weight")));
  EXPECT_EQ(parse_model_format("h5"), ModelFormat::hdf5);
}

}  // namespace
}  // namespace mpitrain::checkpoint
