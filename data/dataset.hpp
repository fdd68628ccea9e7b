#pragma once
// Dataset: a finite, indexable collection of (features, label) examples. Features are fp32,
// flattened row-major from feature_shape() (an IDX image (28, 28) is read as 784 values);
// labels are class indices. Readers implement read_batch(); the public get()/get_batch()
// check indices and buffer sizes once, here, so every reader reports the same errors.
//
// Reading is const and needs no other state than the reader's own, so any rank can read any
// index. Readers are not required to be thread-safe (the HDF5 library is not, unless built
// with --enable-threadsafe): use one reader per thread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::data {

class Dataset {
 public:
  Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
  virtual ~Dataset() = default;

  // Returns the number of examples.
  virtual std::size_t size() const noexcept = 0;
  // Returns the shape of one example's features, e.g. {784} or {28, 28}.
  virtual const Shape& feature_shape() const noexcept = 0;
  // Returns the number of classes when the reader knows it (labels lie in [0, classes)).
  virtual std::optional<std::size_t> num_classes() const noexcept = 0;
  // Returns a one-line description for logs and error messages (file names, sizes).
  virtual std::string describe() const = 0;

  // Returns the number of fp32 values per example: numel(feature_shape()).
  std::size_t feature_size() const noexcept { return mpitrain::numel(feature_shape()); }

  // Reads example `index`: features_out holds feature_size() values.
  // Throws std::out_of_range (index >= size()) or std::invalid_argument (wrong span size).
  void get(std::size_t index, std::span<float> features_out, std::int32_t& label_out) const;

  // Reads examples `indices` (any order, repeats allowed) into features_out, shaped
  // (indices.size(), feature_size()) row-major, and labels_out (indices.size()).
  // Throws std::out_of_range naming the first bad index, std::invalid_argument on wrong
  // span sizes; readers throw std::runtime_error naming the file on I/O errors.
  void get_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                 std::span<std::int32_t> labels_out) const;

 protected:
  // Reads `indices` (all < size(), spans already of the right sizes) as get_batch does.
  virtual void read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                          std::span<std::int32_t> labels_out) const = 0;
};

}  // namespace mpitrain::data
