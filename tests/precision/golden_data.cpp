#include "golden_data.hpp"

#include <hdf5.h>

#include <memory>
#include <stdexcept>
#include <type_traits>

namespace mpitrain::test {
namespace {

// Owns one HDF5 identifier and closes it with `Close`.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle(hid_t id, const std::string& what) : id_(id) {
    if (id_ < 0) throw std::runtime_error("HDF5 " + what + " failed");
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { Close(id_); }
  hid_t get() const noexcept { return id_; }

 private:
  hid_t id_;
};

template <class T>
std::vector<T> read_dataset(hid_t file, const std::string& path) {
  const Handle<H5Dclose> dataset(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "H5Dopen2(" + path + ")");
  const Handle<H5Sclose> space(H5Dget_space(dataset.get()), "H5Dget_space(" + path + ")");
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  if (count < 0) throw std::runtime_error("HDF5 H5Sget_simple_extent_npoints(" + path + ") failed");
  std::vector<T> values(static_cast<std::size_t>(count));
  const hid_t type = std::is_same_v<T, std::uint16_t> ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
  if (H5Dread(dataset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) {
    throw std::runtime_error("HDF5 H5Dread(" + path + ") failed");
  }
  return values;
}

template <class In, class Out>
GoldenCases<In, Out> read_cases(const std::string& name) {
  const std::string file_name = golden_path("conversions.h5");
  const Handle<H5Fclose> file(H5Fopen(file_name.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT),
                              "H5Fopen(" + file_name + ")");
  GoldenCases<In, Out> cases{read_dataset<In>(file.get(), name + "/input"),
                             read_dataset<Out>(file.get(), name + "/output")};
  if (cases.input.size() != cases.output.size() || cases.input.empty()) {
    throw std::runtime_error("golden group " + name + ": " + std::to_string(cases.input.size()) +
                             " inputs but " + std::to_string(cases.output.size()) + " outputs");
  }
  return cases;
}

}  // namespace

std::string golden_path(const std::string& file) { return std::string(MPITRAIN_TEST_DATA_DIR) + "/" + file; }

GoldenCases<std::uint16_t, std::uint32_t> read_widening_cases(const std::string& name) {
  return read_cases<std::uint16_t, std::uint32_t>(name);
}

GoldenCases<std::uint32_t, std::uint16_t> read_narrowing_cases(const std::string& name) {
  return read_cases<std::uint32_t, std::uint16_t>(name);
}

}  // namespace mpitrain::test
