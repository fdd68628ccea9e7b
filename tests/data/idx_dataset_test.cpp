// IdxDataset: small IDX files written here (gzipped and plain) with known contents, every
// error the reader reports, and the real Fashion-MNIST files of dataset-fashion-mnist.

#include "mpitrain/data/idx_dataset.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "h5_test_util.hpp"

namespace mpitrain::data {
namespace {

using test::TempDir;

std::vector<std::uint8_t> idx_header(std::uint32_t magic, const std::vector<std::uint32_t>& dims) {
  std::vector<std::uint8_t> bytes;
  auto put = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8)
      bytes.push_back(static_cast<std::uint8_t>(v >> shift));
  };
  put(magic);
  for (std::uint32_t d : dims) put(d);
  return bytes;
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    if (!bytes.empty()) {
      ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
}

// 3 images of 2 x 3 pixels: pixel j of image i is (6 i + j) * 10; labels 2, 0, 1.
constexpr std::uint32_t kCount = 3, kRows = 2, kCols = 3;
std::uint8_t pixel(std::size_t i, std::size_t j) {
  return static_cast<std::uint8_t>((6 * i + j) * 10);
}

std::vector<std::uint8_t> image_file(std::uint32_t announced = kCount,
                                     std::size_t actual = kCount) {
  std::vector<std::uint8_t> bytes = idx_header(0x803, {announced, kRows, kCols});
  for (std::size_t i = 0; i < actual; ++i) {
    for (std::size_t j = 0; j < kRows * kCols; ++j) bytes.push_back(pixel(i, j));
  }
  return bytes;
}

std::vector<std::uint8_t> label_file(std::vector<std::uint8_t> labels = {2, 0, 1}) {
  std::vector<std::uint8_t> bytes = idx_header(0x801, {static_cast<std::uint32_t>(labels.size())});
  bytes.insert(bytes.end(), labels.begin(), labels.end());
  return bytes;
}

// Returns the message of the std::runtime_error IdxDataset(paths, classes) throws.
std::string load_error(const IdxPaths& paths, std::size_t classes = 3) {
  try {
    IdxDataset dataset(paths, classes);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "IdxDataset accepted " << paths.images << " and " << paths.labels;
  return {};
}

class IdxDatasetTest : public ::testing::TestWithParam<bool> {
 protected:
  bool gzip() const { return GetParam(); }
  std::string name(const std::string& base) const {
    return dir_.file(base + (gzip() ? ".gz" : ""));
  }
  IdxPaths write(const std::vector<std::uint8_t>& images, const std::vector<std::uint8_t>& labels) {
    IdxPaths paths{name("images-idx3-ubyte"), name("labels-idx1-ubyte")};
    write_bytes(paths.images, images, gzip());
    write_bytes(paths.labels, labels, gzip());
    return paths;
  }
  TempDir dir_{"idx_test"};
};

TEST_P(IdxDatasetTest, ReadsKnownContents) {
  const IdxPaths paths = write(image_file(), label_file());
  const IdxDataset dataset(paths, 3);
  EXPECT_EQ(dataset.size(), 3u);
  EXPECT_EQ(dataset.feature_shape(), Shape({6}));
  EXPECT_EQ(dataset.feature_size(), 6u);
  EXPECT_EQ(dataset.image_rows(), 2u);
  EXPECT_EQ(dataset.image_cols(), 3u);
  EXPECT_EQ(dataset.num_classes(), std::optional<std::size_t>(3));
  EXPECT_NE(dataset.describe().find(paths.images), std::string::npos);

  std::vector<float> features(6);
  std::int32_t label = -1;
  dataset.get(1, features, label);
  EXPECT_EQ(label, 0);
  for (std::size_t j = 0; j < 6; ++j) {
    EXPECT_EQ(features[j], static_cast<float>(pixel(1, j)) / 255.0f) << j;
  }

  const std::vector<std::size_t> indices{2, 0, 2};
  std::vector<float> batch(indices.size() * 6);
  std::vector<std::int32_t> labels(indices.size());
  dataset.get_batch(indices, batch, labels);
  EXPECT_EQ(labels, (std::vector<std::int32_t>{1, 2, 1}));
  for (std::size_t r = 0; r < indices.size(); ++r) {
    for (std::size_t j = 0; j < 6; ++j) {
      EXPECT_EQ(batch[r * 6 + j], static_cast<float>(pixel(indices[r], j)) / 255.0f);
    }
  }
}

TEST_P(IdxDatasetTest, BadIndexAndSpanSizesAreRejected) {
  const IdxDataset dataset(write(image_file(), label_file()), 3);
  std::vector<float> features(6);
  std::int32_t label = 0;
  EXPECT_THROW(dataset.get(3, features, label), std::out_of_range);
  std::vector<float> wrong(5);
  EXPECT_THROW(dataset.get(0, wrong, label), std::invalid_argument);
  const std::vector<std::size_t> none;
  dataset.get_batch(none, std::span<float>(), std::span<std::int32_t>());  // empty batch: fine
}

TEST_P(IdxDatasetTest, WrongMagicNamesFileAndBothNumbers) {
  const IdxPaths paths = write(label_file(), label_file());  // a labels file as images
  const std::string msg = load_error(paths);
  EXPECT_NE(msg.find(paths.images), std::string::npos) << msg;
  EXPECT_NE(msg.find("wrong magic number 0x00000801, expected 0x00000803"), std::string::npos)
      << msg;

  const IdxPaths swapped = write(image_file(), image_file());  // images as labels
  const std::string msg2 = load_error(swapped);
  EXPECT_NE(msg2.find(swapped.labels), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("wrong magic number 0x00000803, expected 0x00000801"), std::string::npos)
      << msg2;
}

TEST_P(IdxDatasetTest, TruncatedFileGivesExpectedAndActualBytes) {
  const IdxPaths paths = write(image_file(3, 2), label_file());  // header says 3 images, 2 present
  const std::string msg = load_error(paths);
  EXPECT_NE(msg.find(paths.images), std::string::npos) << msg;
  // 16 header bytes + 3 * 6 pixels expected; 16 + 2 * 6 present.
  EXPECT_NE(msg.find("truncated: expected 34 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 28"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("after gzip decompression") != std::string::npos, gzip()) << msg;

  std::vector<std::uint8_t> short_header = label_file();
  short_header.resize(6);
  const IdxPaths paths2 = write(image_file(), short_header);
  const std::string msg2 = load_error(paths2);
  EXPECT_NE(msg2.find(paths2.labels), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("truncated: expected 8 bytes"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("got 6"), std::string::npos) << msg2;
}

TEST_P(IdxDatasetTest, TrailingBytesAreRejected) {
  std::vector<std::uint8_t> images = image_file();
  images.push_back(7);
  const IdxPaths paths = write(images, label_file());
  const std::string msg = load_error(paths);
  EXPECT_NE(msg.find(paths.images), std::string::npos) << msg;
  EXPECT_NE(msg.find("longer than its header says: expected 34 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 35"), std::string::npos) << msg;
}

TEST_P(IdxDatasetTest, CountMismatchNamesBothCounts) {
  const IdxPaths paths = write(image_file(), label_file({1, 2}));
  const std::string msg = load_error(paths);
  EXPECT_NE(msg.find(paths.labels), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 2 labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 3 images"), std::string::npos) << msg;
}

TEST_P(IdxDatasetTest, LabelOutOfRangeNamesExampleAndRange) {
  const IdxPaths paths = write(image_file(), label_file({2, 7, 1}));
  const std::string msg = load_error(paths, 3);
  EXPECT_NE(msg.find(paths.labels), std::string::npos) << msg;
  EXPECT_NE(msg.find("label 7 of example 1 is out of range [0, 3)"), std::string::npos) << msg;
  EXPECT_NO_THROW(IdxDataset(paths, 8));
}

TEST_P(IdxDatasetTest, MissingFileGivesSystemReason) {
  IdxPaths paths = write(image_file(), label_file());
  paths.labels = dir_.file("no-such-labels");
  const std::string msg = load_error(paths);
  EXPECT_NE(msg.find(paths.labels), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open: No such file or directory"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Compression, IdxDatasetTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "gzip" : "plain";
                         });

TEST(IdxDatasetCorrupt, BrokenGzipStreamNamesFile) {
  TempDir dir("idx_corrupt");
  const IdxPaths paths{dir.file("images.gz"), dir.file("labels.gz")};
  // gzip magic and header, then bytes that are not a deflate stream.
  write_bytes(paths.images, {0x1f, 0x8b, 0x08, 0x00, 0,    0,    0,    0,    0x00, 0x03,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
              false);
  write_bytes(paths.labels, label_file(), true);
  const std::string msg = load_error(paths);
  EXPECT_NE(msg.find(paths.images), std::string::npos) << msg;
}

// The real data set. This test fails (it does not skip) when the files are missing.
TEST(FashionMnist, TrainAndTestFilesLoadWithKnownValues) {
  const IdxPaths train_paths = fashion_mnist_train_paths();
  const IdxPaths test_paths = fashion_mnist_test_paths();
  EXPECT_EQ(train_paths.images, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  EXPECT_EQ(test_paths.labels, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  std::unique_ptr<IdxDataset> train;
  std::unique_ptr<IdxDataset> test;
  try {
    train = std::make_unique<IdxDataset>(train_paths);
    test = std::make_unique<IdxDataset>(test_paths);
  } catch (const std::exception& e) {
    FAIL() << e.what()
           << "\nFashion-MNIST comes from the Debian package dataset-fashion-mnist: run "
              "scripts/install-deps.sh";
  }
  EXPECT_EQ(train->size(), 60000u);
  EXPECT_EQ(test->size(), 10000u);
  EXPECT_EQ(train->feature_size(), 784u);
  EXPECT_EQ(test->feature_shape(), Shape({784}));
  EXPECT_EQ(train->num_classes(), std::optional<std::size_t>(10));

  // Values read with Python (gzip + numpy) from the same files.
  const std::vector<std::size_t> indices{0, 1, 59999};
  std::vector<float> f(indices.size() * 784);
  std::vector<std::int32_t> labels(indices.size());
  train->get_batch(indices, f, labels);
  EXPECT_EQ(labels, (std::vector<std::int32_t>{9, 0, 5}));
  EXPECT_EQ(f[0 * 784 + 0], 0.0f);
  EXPECT_EQ(f[0 * 784 + 100], 73.0f / 255.0f);
  EXPECT_FLOAT_EQ(f[0 * 784 + 100], 0.28627452f);
  EXPECT_EQ(f[1 * 784 + 350], 204.0f / 255.0f);
  EXPECT_EQ(f[2 * 784 + 500], 180.0f / 255.0f);
  double image0 = 0;
  for (std::size_t j = 0; j < 784; ++j) image0 += f[j] * 255.0;
  EXPECT_NEAR(image0, 76247.0, 1e-2);  // sum of image 0's pixels

  // Every label and pixel, in slices of 6000 examples.
  std::array<std::size_t, 10> per_class{};
  std::vector<std::int32_t> train_labels;
  std::uint64_t pixel_sum = 0;
  constexpr std::size_t kSlice = 6000;
  std::vector<std::size_t> slice(kSlice);
  std::vector<float> features(kSlice * 784);
  std::vector<std::int32_t> slice_labels(kSlice);
  for (std::size_t begin = 0; begin < 60000; begin += kSlice) {
    std::iota(slice.begin(), slice.end(), begin);
    train->get_batch(slice, features, slice_labels);
    train_labels.insert(train_labels.end(), slice_labels.begin(), slice_labels.end());
    for (float v : features) pixel_sum += static_cast<std::uint64_t>(std::lround(v * 255.0f));
  }
  EXPECT_EQ(pixel_sum, 3431114169u);  // numpy: images.astype(int64).sum()
  for (std::int32_t l : train_labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++per_class[static_cast<std::size_t>(l)];
  }
  for (std::size_t c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 6000u) << c;
  EXPECT_EQ((std::vector<std::int32_t>(train_labels.begin(), train_labels.begin() + 10)),
            (std::vector<std::int32_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));

  std::vector<float> t(784);
  std::int32_t label = -1;
  test->get(9999, t, label);
  EXPECT_EQ(t[400], 45.0f / 255.0f);
  test->get(0, t, label);
  EXPECT_EQ(label, 9);
  EXPECT_EQ(t[400], 1.0f / 255.0f);
}

}  // namespace
}  // namespace mpitrain::data
