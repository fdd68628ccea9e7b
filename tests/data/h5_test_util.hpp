#pragma once
// Small HDF5 helpers for the data tests: write datasets with the C API, read golden data.
// Every call is checked; a failure throws naming the call and the file.

#include <hdf5.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "temp_dir.hpp"

namespace mpitrain::data::test {

inline hid_t h5_check(hid_t id, const std::string& what) {
  if (id < 0) throw std::runtime_error("HDF5 call failed: " + what);
  return id;
}

// Owns one hid_t.
class H5Id {
 public:
  H5Id(hid_t id, herr_t (*close)(hid_t), const std::string& what)
      : id_(h5_check(id, what)), close_(close) {}
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() { close_(id_); }
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

using test_support::TempDir;  // tests/support/temp_dir.hpp

// Writes `values` as dataset `name` of shape `dims` and HDF5 type `file_type` (memory type
// `memory_type`); chunk_rows > 0 makes it chunked with deflate.
template <typename T>
void write_dataset(hid_t file, const std::string& name, const std::vector<hsize_t>& dims,
                   hid_t file_type, hid_t memory_type, const std::vector<T>& values,
                   hsize_t chunk_rows = 0) {
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
             "H5Screate_simple " + name);
  H5Id props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate");
  if (chunk_rows > 0) {
    std::vector<hsize_t> chunk(dims);
    chunk[0] = chunk_rows;
    h5_check(H5Pset_chunk(props.get(), static_cast<int>(chunk.size()), chunk.data()),
             "H5Pset_chunk");
    h5_check(H5Pset_deflate(props.get(), 4), "H5Pset_deflate");
  }
  H5Id dataset(
      H5Dcreate2(file, name.c_str(), file_type, space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT),
      H5Dclose, "H5Dcreate2 " + name);
  if (!values.empty()) {
    h5_check(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
             "H5Dwrite " + name);
  }
}

// Reads dataset `name` of `path` entirely as `memory_type`; returns (values, dims).
template <typename T>
std::pair<std::vector<T>, std::vector<hsize_t>> read_dataset(const std::string& path,
                                                             const std::string& name,
                                                             hid_t memory_type) {
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "H5Fopen " + path);
  H5Id dataset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose,
               "H5Dopen2 " + path + ":" + name);
  H5Id space(H5Dget_space(dataset.get()), H5Sclose, "H5Dget_space");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  h5_check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "extent dims");
  std::size_t count = 1;
  for (hsize_t d : dims) count *= static_cast<std::size_t>(d);
  std::vector<T> values(count);
  if (count > 0) {
    h5_check(H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
             "H5Dread " + path + ":" + name);
  }
  return {std::move(values), std::move(dims)};
}

}  // namespace mpitrain::data::test
