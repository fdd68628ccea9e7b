#pragma once
// IdxDataset: MNIST-family data sets in the IDX format (LeCun's MNIST, Fashion-MNIST), the
// files gzipped or not (zlib reads both; gzip is recognised by its magic bytes 1f 8b).
// Images (magic 0x00000803: uint8, dimensions n x rows x cols, big-endian) become fp32
// features pixel / 255, flattened row-major to rows * cols values; labels (magic
// 0x00000801: uint8, n) become int32 class indices.
//
// Both files are read once, at construction, and kept in memory as uint8 (Fashion-MNIST
// train: 47 MB, against 188 MB as fp32); each read converts its rows (one table lookup per
// pixel). Loading costs one pass of decompression over the files (0.6 s measured for the
// 26 MB gzipped Fashion-MNIST training images); a read of k examples costs O(k * rows * cols)
// (an epoch of Fashion-MNIST in batches of 64: 0.08 s).
// Errors name the file and what is wrong: missing or unreadable (with the system's reason),
// wrong magic number (expected and actual), truncated or over-long (expected and actual
// byte counts, after decompression), image and label counts that differ, a label outside
// [0, num_classes).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/data/dataset.hpp"

namespace mpitrain::data {

struct IdxPaths {
  std::string images;
  std::string labels;
};

// Returns the Fashion-MNIST training files of the Debian package dataset-fashion-mnist:
// /usr/share/datasets/fashion-mnist/train-{images-idx3,labels-idx1}-ubyte.gz.
IdxPaths fashion_mnist_train_paths();
// Returns the Fashion-MNIST test files (t10k-...) of the same package.
IdxPaths fashion_mnist_test_paths();

class IdxDataset final : public Dataset {
 public:
  // Reads both files. Throws std::runtime_error naming the file on any error listed above.
  explicit IdxDataset(const IdxPaths& paths, std::size_t num_classes = 10);

  std::size_t size() const noexcept override { return count_; }
  const Shape& feature_shape() const noexcept override { return feature_shape_; }
  std::optional<std::size_t> num_classes() const noexcept override { return num_classes_; }
  std::string describe() const override;

  std::size_t image_rows() const noexcept { return rows_; }
  std::size_t image_cols() const noexcept { return cols_; }
  const IdxPaths& paths() const noexcept { return paths_; }

 protected:
  void read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                  std::span<std::int32_t> labels_out) const override;

 private:
  IdxPaths paths_;
  std::size_t num_classes_;
  std::size_t count_ = 0;
  std::size_t rows_ = 0;
  std::size_t cols_ = 0;
  Shape feature_shape_;
  std::vector<std::uint8_t> pixels_;  // (count, rows * cols) row-major
  std::vector<std::uint8_t> labels_;  // (count)
};

}  // namespace mpitrain::data
