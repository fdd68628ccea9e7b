#pragma once
// Hdf5Dataset: examples stored in an HDF5 file as two datasets, features (n, d) or
// (n, d1, d2, ...) (flattened row-major to d1 * d2 * ... values), and labels (n), integers.
// Feature elements: any floating-point type (HDF5 converts to fp32 while reading) or uint8
// (converted to value / uint8_divisor in fp32, by default value / 255 as IdxDataset does).
//
// Labels are read once at open (n * 8 bytes), checked, and kept in memory; features are
// read per get_batch, and only the rows asked for: the indices are sorted, duplicates read
// once, consecutive rows coalesced into runs, and the union of those runs read with one
// H5Dread through a hyperslab selection, then scattered into request order.
// Cost of a batch of k indices forming r runs: O(k log k) to sort, r hyperslab blocks OR-ed
// into one selection (about 0.1 ms for r = 64), one H5Dread, and k * d values of scratch
// unless the indices are strictly increasing (then HDF5 reads straight into the output).
// The file is opened without HDF5's sieve buffer, so a contiguous dataset reads just the
// selected rows. A chunked (possibly compressed) dataset reads and decompresses every chunk
// the selection touches, through a chunk cache of 1 MiB by default: shuffled batches then
// decompress about one chunk per row. Measured on Fashion-MNIST-sized data (60000 x 784
// fp32), batches of 64, 2 shared cores:
//   contiguous:                          0.04 ms sequential, 0.4 ms shuffled per batch;
//   chunks of 256 rows, deflate level 4: 4 ms sequential, 300 ms shuffled per batch,
//                                        6 ms shuffled with chunk_cache_bytes = 256 MiB.
// So store training data contiguous (h5py's default), or give the cache the whole dataset.
//
// HDF5 prints its error stack to stderr by default. This class turns that off only around
// its own HDF5 calls (saving and restoring the previous handler with H5Eget_auto2 /
// H5Eset_auto2), and puts the stack's messages into its exceptions instead. The handler is
// process-wide state in HDF5 builds without thread safety (Debian's serial build), so do not
// run other HDF5 code concurrently on another thread (HDF5 forbids that anyway).
// Errors (std::runtime_error) name the file, the dataset and what is wrong.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mpitrain/data/dataset.hpp"

namespace mpitrain::data {

struct Hdf5DatasetOptions {
  std::string features = "features";  // path of the features dataset inside the file
  std::string labels = "labels";      // path of the labels dataset inside the file
  // Classes; labels must lie in [0, num_classes). Unset: max label + 1.
  std::optional<std::size_t> num_classes;
  float uint8_divisor = 255.0f;  // uint8 features become value / uint8_divisor
  // Chunk cache of the features dataset, bytes; 0 keeps HDF5's default (1 MiB). Only
  // chunked datasets use it: size it to the uncompressed dataset to decompress each chunk
  // once, not once per row (see the cost note above).
  std::size_t chunk_cache_bytes = 0;
};

class Hdf5Dataset final : public Dataset {
 public:
  // Opens `path` read-only and checks both datasets; throws std::runtime_error naming the
  // file and dataset (missing file or dataset, shapes that disagree, unsupported element
  // types, labels out of range).
  explicit Hdf5Dataset(std::string path, Hdf5DatasetOptions options = {});
  ~Hdf5Dataset() override;

  std::size_t size() const noexcept override;
  const Shape& feature_shape() const noexcept override;
  std::optional<std::size_t> num_classes() const noexcept override;
  std::string describe() const override;

  const std::string& path() const noexcept;
  const Hdf5DatasetOptions& options() const noexcept;

 protected:
  void read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                  std::span<std::int32_t> labels_out) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpitrain::data
