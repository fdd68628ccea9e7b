// save_model: model.h5 and model.safetensors hold the weights under PyTorch names and
// shapes, readable by h5py/numpy (check_saved_model.py), and the safetensors reader refuses
// malformed files.

#include "mpitrain/checkpoint/save_model.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/safetensors.hpp"
#include "mpitrain/nn/parameter.hpp"

#ifndef MPITRAIN_CHECK_SAVED_MODEL_PY
#error "CMake passes the path of check_saved_model.py"
#endif

namespace mpitrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::closed_form_tensor;
using testing::TempDir;

// The parameters of check_saved_model.py's EXPECTED: names, torch shapes and salts.
std::vector<nn::Parameter> make_parameters(float offset) {
  std::vector<nn::Parameter> params;
  const auto add = [&](const char* name, Shape shape, float salt) {
    nn::Parameter p;
    p.name = name;
    p.value = closed_form_tensor(shape, salt + offset);
    p.grad = Tensor(shape);
    params.push_back(std::move(p));
  };
  add("0.weight", {4, 3}, 1.0f);
  add("0.bias", {4}, 2.0f);
  add("2.weight", {2, 4}, 3.0f);
  add("2.bias", {2}, 4.0f);
  add("norm.scale", {}, 5.0f);
  return params;
}

// The parameters as save_model takes them: their values under their names.
std::vector<NamedTensor> named(std::vector<nn::Parameter>& params) {
  std::vector<nn::Parameter*> pointers;
  for (nn::Parameter& p : params) pointers.push_back(&p);
  return nn::named_tensors(pointers);
}

TEST(SaveModel, AFailedRenameNamesItsCauseAndLeavesNoTempFile) {
  TempDir dir("model_rename");
  std::vector<nn::Parameter> params = make_parameters(0.0f);
  // A non-empty folder where model.h5 goes: rename(2) of the written file onto it fails.
  fs::create_directories(dir.path() / "model.h5" / "in_the_way");
  try {
    save_model(dir.path(), named(params), ModelFormat::hdf5);
    ADD_FAILURE() << "renaming onto a folder must fail";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rename '"), std::string::npos) << msg;
    EXPECT_NE(msg.find((dir.path() / "model.h5").string() + "' failed: Is a directory"),
              std::string::npos)
        << msg;
  }
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  }
  EXPECT_TRUE(fs::is_directory(dir.path() / "model.h5" / "in_the_way"));
}

TEST(SaveModel, PythonReadsBothFormatsWithTorchNamesAndShapes) {
  TempDir dir("model");
  // A first save with other values, then the real one: files are replaced whole.
  std::vector<nn::Parameter> stale = make_parameters(100.0f);
  std::vector<nn::Parameter> params = make_parameters(0.0f);
  for (const ModelFormat format : {ModelFormat::hdf5, ModelFormat::safetensors}) {
    save_model(dir.path(), named(stale), format);
    const fs::path written = save_model(dir.path(), named(params), format);
    EXPECT_EQ(written, dir.path() / (format == ModelFormat::hdf5 ? "model.h5" : "model.safetensors"));
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"model.h5", "model.safetensors"}));  // no leftovers

  std::string output;
  const int code = testing::run_process(
      {"/usr/bin/python3", MPITRAIN_CHECK_SAVED_MODEL_PY, dir.path().string()}, output);
  EXPECT_EQ(code, 0) << output;
  EXPECT_EQ(output, "ok\n");

  const SafetensorsContents back = read_safetensors(dir.path() / "model.safetensors");
  ASSERT_EQ(back.tensors.size(), params.size());
  for (const nn::Parameter& p : params) {
    const Tensor& t = back.tensors.at(p.name);
    ASSERT_EQ(t.shape(), p.value.shape()) << p.name;
    for (std::size_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t[i], p.value[i]) << p.name;
  }
}

TEST(SaveModel, SafetensorsHeaderFollowsTheSpecification) {
  TempDir dir("st");
  std::vector<nn::Parameter> params = make_parameters(0.0f);
  const fs::path file = save_model(dir.path(), named(params), ModelFormat::safetensors);
  const std::string blob = testing::read_file(file);
  std::uint64_t n = 0;
  std::memcpy(&n, blob.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(blob[8], '{');
  // Names in order, data back to back: 0.bias (16 B), 0.weight (48), 2.bias (8), 2.weight (32),
  // norm.scale (4).
  const std::string header = blob.substr(8, n);
  EXPECT_NE(header.find("\"0.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("\"norm.scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[104,108]}"),
            std::string::npos)
      << header;
  EXPECT_EQ(blob.size(), 8 + n + 108);

  const auto expect_refused = [&](const std::string& bytes, const std::string& needle) {
    const fs::path bad = dir.path() / "bad.safetensors";
    std::ofstream(bad, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    try {
      (void)read_safetensors(bad);
      ADD_FAILURE() << "accepted a malformed file (" << needle << ")";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused(blob.substr(0, blob.size() - 4), "beyond the data");  // truncated data
  expect_refused(blob.substr(0, 4), "shorter than");
  std::string huge = blob;
  const std::uint64_t too_long = blob.size();
  std::memcpy(huge.data(), &too_long, 8);
  expect_refused(huge, "exceeds the file");
  expect_refused(blob + "xxxx", "no tensor covers");
  // A file that cannot be opened: the error names the cause.
  try {
    (void)read_safetensors(dir.path() / "missing.safetensors");
    ADD_FAILURE() << "read a missing file";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be opened: No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

TEST(SaveModel, RefusesDuplicateNamesAndUnknownFormats) {
  TempDir dir("dup");
  std::vector<nn::Parameter> params = make_parameters(0.0f);
  params[1].name = params[0].name;
  EXPECT_THROW(save_model(dir.path(), named(params), ModelFormat::hdf5), std::invalid_argument);
  const std::vector<NamedTensor> with_null{{"0.weight", nullptr}};
  EXPECT_THROW(save_model(dir.path(), with_null, ModelFormat::hdf5), std::invalid_argument);
  EXPECT_THROW((void)parse_model_format("pickle"), std::invalid_argument);
  EXPECT_EQ(parse_model_format("safetensors"), ModelFormat::safetensors);
  EXPECT_EQ(to_string(ModelFormat::hdf5), "hdf5");
}

}  // namespace
}  // namespace mpitrain::checkpoint
