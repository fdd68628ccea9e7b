// Hdf5Dataset: files written here with the HDF5 C API; batch reads (any order, repeats,
// contiguous, chunked + compressed, uint8) equal the values written; errors name the file,
// the dataset and the problem, and HDF5 prints nothing.

#include "mpitrain/data/hdf5_dataset.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "h5_test_util.hpp"

namespace mpitrain::data {
namespace {

using test::H5Id;
using test::TempDir;
using test::write_dataset;

constexpr std::size_t kN = 10;

// Feature value j of example i (features of shape (kN, 2, 3)).
float feature(std::size_t i, std::size_t j) { return static_cast<float>(i * 100 + j) + 0.25f; }
std::uint8_t byte_feature(std::size_t i, std::size_t j) {
  return static_cast<std::uint8_t>(i * 10 + j);
}
std::int64_t label_of(std::size_t i) { return static_cast<std::int64_t>(i % 4); }

class Hdf5DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    H5Id file(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
              "H5Fcreate " + path_);
    std::vector<float> x(kN * 6);
    std::vector<std::uint8_t> bytes(kN * 4);
    std::vector<std::int64_t> y(kN);
    std::vector<std::int32_t> y32(kN);
    for (std::size_t i = 0; i < kN; ++i) {
      for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = feature(i, j);
      for (std::size_t j = 0; j < 4; ++j) bytes[i * 4 + j] = byte_feature(i, j);
      y[i] = label_of(i);
      y32[i] = static_cast<std::int32_t>(label_of(i));
    }
    write_dataset(file.get(), "x", {kN, 2, 3}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x);
    write_dataset(file.get(), "x_chunked", {kN, 2, 3}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, x, 3);
    write_dataset(file.get(), "x_u8", {kN, 4}, H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes);
    write_dataset(file.get(), "y", {kN}, H5T_STD_I64LE, H5T_NATIVE_INT64, y);
    write_dataset(file.get(), "y32", {kN}, H5T_STD_I32LE, H5T_NATIVE_INT32, y32);
    write_dataset(file.get(), "y_short", {kN - 1}, H5T_STD_I64LE, H5T_NATIVE_INT64,
                  std::vector<std::int64_t>(kN - 1, 0));
    std::vector<std::int64_t> bad = y;
    bad[6] = -1;
    write_dataset(file.get(), "y_negative", {kN}, H5T_STD_I64LE, H5T_NATIVE_INT64, bad);
    write_dataset(file.get(), "x_1d", {kN}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                  std::vector<float>(kN, 1.0f));
    write_dataset(file.get(), "x_int", {kN, 2}, H5T_STD_I32LE, H5T_NATIVE_INT32,
                  std::vector<std::int32_t>(kN * 2, 1));
    write_dataset(file.get(), "y_float", {kN}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                  std::vector<float>(kN, 1.0f));
  }

  // Returns the message of the std::runtime_error opening `path` with `options` throws.
  std::string open_error(const std::string& path, const Hdf5DatasetOptions& options) {
    testing::internal::CaptureStderr();
    std::string msg;
    try {
      Hdf5Dataset dataset(path, options);
      ADD_FAILURE() << "opened " << path << " " << options.features << " " << options.labels;
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
    const std::string printed = testing::internal::GetCapturedStderr();
    EXPECT_EQ(printed, "") << "HDF5 printed its error stack";
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    return msg;
  }

  static Hdf5DatasetOptions names(std::string features, std::string labels) {
    Hdf5DatasetOptions o;
    o.features = std::move(features);
    o.labels = std::move(labels);
    return o;
  }

  void expect_rows(const Hdf5Dataset& dataset, const std::vector<std::size_t>& indices) {
    std::vector<float> out(indices.size() * 6, -1.0f);
    std::vector<std::int32_t> labels(indices.size(), -1);
    dataset.get_batch(indices, out, labels);
    for (std::size_t r = 0; r < indices.size(); ++r) {
      EXPECT_EQ(labels[r], label_of(indices[r])) << r;
      for (std::size_t j = 0; j < 6; ++j) {
        EXPECT_EQ(out[r * 6 + j], feature(indices[r], j)) << "row " << r << " value " << j;
      }
    }
  }

  TempDir dir_{"hdf5_test"};
  std::string path_ = dir_.file("data.h5");
};

TEST_F(Hdf5DatasetTest, ShapeAndClasses) {
  const Hdf5Dataset dataset(path_, names("x", "y"));
  EXPECT_EQ(dataset.size(), kN);
  EXPECT_EQ(dataset.feature_shape(), Shape({2, 3}));
  EXPECT_EQ(dataset.feature_size(), 6u);
  EXPECT_EQ(dataset.num_classes(), std::optional<std::size_t>(4));  // max label + 1
  Hdf5DatasetOptions o = names("x", "y32");
  o.num_classes = 9;
  EXPECT_EQ(Hdf5Dataset(path_, o).num_classes(), std::optional<std::size_t>(9));
}

TEST_F(Hdf5DatasetTest, BatchReadsEqualWrittenValues) {
  for (int variant = 0; variant < 3; ++variant) {
    const char* name = variant == 0 ? "x" : "x_chunked";
    Hdf5DatasetOptions o = names(name, "y");
    o.chunk_cache_bytes = variant == 2 ? std::size_t{1} << 22 : 0;
    SCOPED_TRACE(std::string(name) + " cache " + std::to_string(o.chunk_cache_bytes));
    const Hdf5Dataset dataset(path_, o);
    expect_rows(dataset, {7, 2, 2, 9, 0, 1, 3});  // any order, a repeat
    expect_rows(dataset, {1, 2, 3, 8});           // increasing: read in place
    expect_rows(dataset, {5});
    expect_rows(dataset, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
    std::vector<float> one(6);
    std::int32_t label = -1;
    dataset.get(4, one, label);
    EXPECT_EQ(label, 0);
    EXPECT_EQ(one[5], feature(4, 5));
  }
}

TEST_F(Hdf5DatasetTest, Uint8FeaturesAreDividedBy255) {
  const Hdf5Dataset dataset(path_, names("x_u8", "y32"));
  EXPECT_EQ(dataset.feature_shape(), Shape({4}));
  const std::vector<std::size_t> indices{9, 0, 4, 9};
  std::vector<float> out(indices.size() * 4);
  std::vector<std::int32_t> labels(indices.size());
  dataset.get_batch(indices, out, labels);
  for (std::size_t r = 0; r < indices.size(); ++r) {
    EXPECT_EQ(labels[r], label_of(indices[r]));
    for (std::size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(out[r * 4 + j], static_cast<float>(byte_feature(indices[r], j)) / 255.0f);
    }
  }
  Hdf5DatasetOptions raw = names("x_u8", "y32");
  raw.uint8_divisor = 1.0f;
  std::vector<float> one(4);
  std::int32_t label = 0;
  Hdf5Dataset(path_, raw).get(3, one, label);
  EXPECT_EQ(one[2], 32.0f);
}

TEST_F(Hdf5DatasetTest, ErrorsNameFileDatasetAndProblem) {
  std::string msg = open_error(dir_.file("missing.h5"), names("x", "y"));
  EXPECT_NE(msg.find("cannot open: No such file or directory"), std::string::npos) << msg;

  msg = open_error(path_, names("nope", "y"));
  EXPECT_NE(msg.find("dataset 'nope': no such dataset"), std::string::npos) << msg;
  msg = open_error(path_, names("x", "labels"));
  EXPECT_NE(msg.find("dataset 'labels': no such dataset"), std::string::npos) << msg;

  msg = open_error(path_, names("x", "y_short"));
  EXPECT_NE(msg.find("dataset 'y_short': shape mismatch: labels have shape (9), expected (10)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("(10, 2, 3)"), std::string::npos) << msg;

  msg = open_error(path_, names("x_1d", "y"));
  EXPECT_NE(msg.find("dataset 'x_1d': shape mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at least 2 dimensions"), std::string::npos) << msg;

  msg = open_error(path_, names("x_int", "y"));
  EXPECT_NE(msg.find("dataset 'x_int': unsupported element type: 4-byte signed integers"),
            std::string::npos)
      << msg;
  msg = open_error(path_, names("x", "y_float"));
  EXPECT_NE(msg.find("dataset 'y_float': unsupported element type"), std::string::npos) << msg;

  msg = open_error(path_, names("x", "y_negative"));
  EXPECT_NE(msg.find("label -1 of example 6 is out of range"), std::string::npos) << msg;
  Hdf5DatasetOptions few = names("x", "y");
  few.num_classes = 3;
  msg = open_error(path_, few);
  EXPECT_NE(msg.find("label 3 of example 3 is out of range [0, 3)"), std::string::npos) << msg;

  const std::string not_hdf5 = dir_.file("text.h5");
  { std::ofstream(not_hdf5) << "not an HDF5 file\n"; }
  msg = open_error(not_hdf5, names("x", "y"));
  EXPECT_NE(msg.find("cannot open as HDF5"), std::string::npos) << msg;
}

TEST_F(Hdf5DatasetTest, PreviousErrorHandlerIsRestored) {
  H5E_auto2_t before = nullptr;
  void* before_data = nullptr;
  ASSERT_GE(H5Eget_auto2(H5E_DEFAULT, &before, &before_data), 0);
  open_error(path_, names("nope", "y"));
  H5E_auto2_t after = nullptr;
  void* after_data = nullptr;
  ASSERT_GE(H5Eget_auto2(H5E_DEFAULT, &after, &after_data), 0);
  EXPECT_EQ(before, after);
  EXPECT_EQ(before_data, after_data);
  EXPECT_NE(after, nullptr);  // HDF5's default printer is still on for everyone else
}

}  // namespace
}  // namespace mpitrain::data
