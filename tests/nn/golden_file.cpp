#include "golden_file.hpp"

#include <hdf5.h>

#include <stdexcept>

namespace mpitrain::nn::testing {
namespace {

// Closes an HDF5 identifier with the matching H5?close on scope exit.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) throw std::runtime_error("HDF5: cannot open " + what);
  }
  ~Handle() { close_(id_); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const noexcept { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

std::vector<hsize_t> extents(hid_t dataset, const std::string& what) {
  Handle space(H5Dget_space(dataset), H5Sclose, "the dataspace of " + what);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw std::runtime_error("HDF5: H5Sget_simple_extent_ndims failed for " + what);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    throw std::runtime_error("HDF5: H5Sget_simple_extent_dims failed for " + what);
  }
  return dims;
}

}  // namespace

std::string golden_path(const std::string& file_name) {
  return std::string(MPITRAIN_TEST_DATA_DIR) + "/" + file_name;
}

GoldenFile::GoldenFile(const std::string& path)
    : path_(path), file_(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)) {
  if (file_ < 0) throw std::runtime_error("HDF5: H5Fopen failed for " + path);
}

GoldenFile::~GoldenFile() { H5Fclose(static_cast<hid_t>(file_)); }

Tensor GoldenFile::tensor(const std::string& name) const {
  const std::string what = path_ + ":" + name;
  Handle ds(H5Dopen2(static_cast<hid_t>(file_), name.c_str(), H5P_DEFAULT), H5Dclose, what);
  Shape shape;
  for (hsize_t d : extents(ds.get(), what)) shape.push_back(static_cast<std::size_t>(d));
  Tensor t(shape);
  if (!t.empty() &&
      H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()) < 0) {
    throw std::runtime_error("HDF5: H5Dread failed for " + what);
  }
  return t;
}

std::vector<std::int32_t> GoldenFile::ints(const std::string& name) const {
  const std::string what = path_ + ":" + name;
  Handle ds(H5Dopen2(static_cast<hid_t>(file_), name.c_str(), H5P_DEFAULT), H5Dclose, what);
  std::size_t n = 1;
  for (hsize_t d : extents(ds.get(), what)) n *= static_cast<std::size_t>(d);
  std::vector<std::int32_t> v(n);
  if (n > 0 &&
      H5Dread(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) {
    throw std::runtime_error("HDF5: H5Dread failed for " + what);
  }
  return v;
}

float GoldenFile::scalar(const std::string& name) const {
  const Tensor t = tensor(name);
  if (t.numel() != 1) {
    throw std::runtime_error("golden " + path_ + ":" + name + " is not a scalar");
  }
  return t[0];
}

}  // namespace mpitrain::nn::testing
