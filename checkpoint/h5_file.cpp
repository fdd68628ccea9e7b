#include "mpitrain/checkpoint/h5_file.hpp"

#include <fmt/format.h>

#include <hdf5.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "mpitrain/checkpoint/durable_io.hpp"
#include "mpitrain/checkpoint/fletcher32.hpp"

namespace mpitrain::checkpoint {

static_assert(std::endian::native == std::endian::little,
              "tensor chunks are written and read as raw little-endian float32");
static_assert(std::is_same_v<hid_t, std::int64_t>,
              "H5Id stores identifiers as int64_t: HDF5 1.10 or later is required");

namespace {

// Switches HDF5's automatic error printing off for this thread's default error stack while
// in scope, and restores whatever handler was installed before (a host program's own).
class QuietErrors {
 public:
  QuietErrors() noexcept {
    if (H5Eget_auto2(H5E_DEFAULT, &func_, &data_) >= 0) {
      saved_ = H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
    }
  }
  ~QuietErrors() {
    if (saved_) H5Eset_auto2(H5E_DEFAULT, func_, data_);
  }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
  bool saved_ = false;
};

herr_t collect_error(unsigned /*n*/, const H5E_error2_t* err, void* client) {
  auto* lines = static_cast<std::vector<std::string>*>(client);
  std::string line = err->func_name != nullptr ? err->func_name : "?";
  line += ": ";
  line += err->desc != nullptr ? err->desc : "(no description)";
  lines->push_back(std::move(line));
  return 0;
}

// Returns the innermost entries of this thread's HDF5 error stack, innermost first.
std::string error_stack_text() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &lines);
  H5Eclear2(H5E_DEFAULT);
  std::string text;
  constexpr std::size_t kMaxLines = 5;  // the innermost ones say what actually went wrong
  std::size_t used = 0;
  for (auto it = lines.rbegin(); it != lines.rend() && used < kMaxLines; ++it, ++used) {
    if (!text.empty()) text += " <- ";
    text += *it;
  }
  return text;
}

[[noreturn]] void fail(std::string_view call, const std::string& file, const std::string& object,
                       std::string_view detail = {}) {
  std::string msg = "HDF5 ";
  msg += call;
  msg += " failed for '" + object + "' in file '" + file + "'";
  if (!detail.empty()) {
    msg += ": ";
    msg += detail;
  }
  const std::string stack = error_stack_text();
  if (!stack.empty()) msg += " [HDF5: " + stack + "]";
  throw H5Error(msg);
}

// Throws a format error (not an HDF5 call failure) naming file and object.
[[noreturn]] void invalid(const std::string& file, const std::string& object,
                          std::string_view what) {
  std::string msg = "checkpoint file '" + file + "', object '" + object + "': ";
  msg += what;
  throw H5Error(msg);
}

hid_t check_id(hid_t id, std::string_view call, const std::string& file,
               const std::string& object) {
  if (id < 0) fail(call, file, object);
  return id;
}

void check(herr_t rc, std::string_view call, const std::string& file, const std::string& object) {
  if (rc < 0) fail(call, file, object);
}

std::string join_path(const std::string& base, std::string_view name) {
  std::string out = base;
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

// Rejects relative paths HDF5 would interpret specially (is_valid_object_name).
void check_relative_name(const std::string& file, const std::string& base, std::string_view name) {
  if (!is_valid_object_name(name)) invalid(file, base, "invalid name '" + std::string(name) + "'");
}

H5Id make_plist(hid_t cls, const std::string& file, const std::string& object) {
  return {check_id(H5Pcreate(cls), "H5Pcreate", file, object), H5Id::Kind::plist};
}

H5Id link_create_plist(const std::string& file, const std::string& object) {
  H5Id lcpl = make_plist(H5P_LINK_CREATE, file, object);
  check(H5Pset_create_intermediate_group(lcpl.get(), 1), "H5Pset_create_intermediate_group", file,
        object);
  check(H5Pset_char_encoding(lcpl.get(), H5T_CSET_UTF8), "H5Pset_char_encoding", file, object);
  return lcpl;
}

// Returns a fixed-length, NUL-padded UTF-8 string type of `bytes` bytes (at least 1: HDF5
// has no zero-length fixed strings).
H5Id string_type(std::size_t bytes, const std::string& file, const std::string& object) {
  H5Id type(check_id(H5Tcopy(H5T_C_S1), "H5Tcopy", file, object), H5Id::Kind::datatype);
  check(H5Tset_size(type.get(), std::max<std::size_t>(bytes, 1)), "H5Tset_size", file, object);
  check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "H5Tset_strpad", file, object);
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", file, object);
  return type;
}

std::string strip_trailing_nuls(std::string s) {
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// Returns the chunk shape for a dataset: runs of whole rows (the leading dimension split)
// of about chunk_bytes, so that each chunk is one contiguous range of the row-major data.
// Only a row larger than HDF5's chunk limit (4 GiB) splits later dimensions too.
std::vector<hsize_t> chunk_dims(const Shape& shape, std::size_t chunk_bytes) {
  // HDF5 stores a filtered chunk's size in 32 bits: data plus the 4-byte checksum < 4 GiB.
  constexpr std::size_t kMaxChunkElements = (std::size_t{1} << 30) - 2;
  std::vector<hsize_t> chunk(shape.begin(), shape.end());
  std::size_t row = 1;  // elements per unit of the leading dimension
  for (std::size_t j = 1; j < chunk.size(); ++j) row *= chunk[j];
  const std::size_t target =
      std::min(std::max<std::size_t>(chunk_bytes / sizeof(float), row), kMaxChunkElements);
  if (row <= kMaxChunkElements) {
    chunk[0] = std::max<std::size_t>(std::min<std::size_t>(target / row, shape[0]), 1);
    return chunk;
  }
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    std::size_t rest = 1;
    for (std::size_t j = i + 1; j < chunk.size(); ++j) rest *= chunk[j];
    if (chunk[i] * rest <= kMaxChunkElements) break;
    const std::size_t units = kMaxChunkElements / rest;
    chunk[i] = std::max<std::size_t>(units, 1);
    if (units >= 1) break;
  }
  return chunk;
}

// Returns true when chunks are runs of whole rows: chunk i holds rows [i*c0, (i+1)*c0).
bool chunks_are_row_runs(const std::vector<hsize_t>& chunk, const Shape& shape) {
  for (std::size_t j = 1; j < chunk.size(); ++j) {
    if (chunk[j] != shape[j]) return false;
  }
  return !chunk.empty();
}

std::uint32_t load_le32(const unsigned char* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

void store_le32(unsigned char* p, std::uint32_t v) noexcept {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
  p[2] = static_cast<unsigned char>(v >> 16);
  p[3] = static_cast<unsigned char>(v >> 24);
}

constexpr std::size_t kChecksumBytes = 4;  // the Fletcher32 filter's trailer

// Writes the rows of a float32 dataset chunk by chunk with H5Dwrite_chunk, each followed by
// its Fletcher32 (what the filter would store). Edge chunks are zero-padded to full size, as
// HDF5 stores them. Cost: one copy into a staging chunk and one checksum pass.
void write_chunks_directly(hid_t dataset, std::span<const float> data, const Shape& shape,
                           const std::vector<hsize_t>& chunk, const std::string& file,
                           const std::string& object) {
  const std::size_t row = data.size() / shape[0];
  const std::size_t chunk_values = chunk[0] * row;
  const std::size_t chunk_bytes = chunk_values * sizeof(float);
  std::vector<unsigned char> staging(chunk_bytes + kChecksumBytes);
  std::vector<hsize_t> offset(shape.size(), 0);
  for (std::size_t first = 0; first < shape[0]; first += chunk[0]) {
    const std::size_t rows = std::min<std::size_t>(chunk[0], shape[0] - first);
    const std::size_t bytes = rows * row * sizeof(float);
    std::memcpy(staging.data(), data.data() + first * row, bytes);
    std::memset(staging.data() + bytes, 0, chunk_bytes - bytes);
    store_le32(staging.data() + chunk_bytes, fletcher32({staging.data(), chunk_bytes}));
    offset[0] = first;
    check(H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, offset.data(), staging.size(), staging.data()),
          "H5Dwrite_chunk", file, object + " (chunk at row " + std::to_string(first) + ")");
  }
}

// Reads the rows of a float32 dataset chunk by chunk with H5Dread_chunk and checks each
// chunk's Fletcher32. Chunks before the last are read straight into `out`; the 4-byte
// checksum then lands on the first bytes of the next chunk's rows, which the next read
// overwrites, so no staging copy is needed except for the last chunk.
void read_chunks_directly(hid_t dataset, std::span<float> out, const Shape& shape,
                          const std::vector<hsize_t>& chunk, const std::string& file,
                          const std::string& object) {
  const std::size_t row = out.size() / shape[0];
  const std::size_t chunk_bytes = chunk[0] * row * sizeof(float);
  std::vector<unsigned char> staging;
  std::vector<hsize_t> offset(shape.size(), 0);
  auto* base = reinterpret_cast<unsigned char*>(out.data());
  for (std::size_t first = 0; first < shape[0]; first += chunk[0]) {
    const std::string where = object + " (chunk at row " + std::to_string(first) + ")";
    offset[0] = first;
    hsize_t stored = 0;
    check(H5Dget_chunk_storage_size(dataset, offset.data(), &stored), "H5Dget_chunk_storage_size",
          file, where);
    if (stored != chunk_bytes + kChecksumBytes) {
      invalid(file, where, "chunk holds " + std::to_string(stored) + " bytes, expected " +
                               std::to_string(chunk_bytes + kChecksumBytes));
    }
    const bool last = first + chunk[0] >= shape[0];
    unsigned char* dest = base + first * row * sizeof(float);
    if (last) {
      staging.resize(chunk_bytes + kChecksumBytes);
      dest = staging.data();
    }
    std::uint32_t filter_mask = 0;
    check(H5Dread_chunk(dataset, H5P_DEFAULT, offset.data(), &filter_mask, dest), "H5Dread_chunk",
          file, where);
    if (filter_mask != 0) invalid(file, where, "chunk was stored without its Fletcher32 filter");
    const std::uint32_t expected = load_le32(dest + chunk_bytes);
    const std::uint32_t actual = fletcher32({dest, chunk_bytes});
    if (actual != expected) {
      invalid(file, where, "data error detected by Fletcher32 checksum (stored " +
                               std::to_string(expected) + ", computed " + std::to_string(actual) +
                               ")");
    }
    if (last) {
      const std::size_t rows = shape[0] - first;
      std::memcpy(base + first * row * sizeof(float), staging.data(), rows * row * sizeof(float));
    }
  }
}

struct OpenedDataset {
  H5Id dataset;
  H5Id type;
  H5Id space;
};

// Returns true when `name` (relative to loc) resolves through hard links only.
bool hard_path_exists(hid_t loc, std::string_view name, const std::string& file,
                      const std::string& base) {
  std::string prefix;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    if (!prefix.empty()) prefix += '/';
    prefix += name.substr(start, end - start);
    const htri_t exists = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (exists < 0) fail("H5Lexists", file, join_path(base, prefix));
    if (exists == 0) return false;
    H5L_info_t info;
    check(H5Lget_info(loc, prefix.c_str(), &info, H5P_DEFAULT), "H5Lget_info", file,
          join_path(base, prefix));
    if (info.type != H5L_TYPE_HARD) {
      invalid(file, join_path(base, prefix), "is a soft or external link; only hard links are read");
    }
    start = end + 1;
  }
  return true;
}

H5O_type_t object_type(hid_t loc, std::string_view name, const std::string& file,
                       const std::string& base) {
  check_relative_name(file, base, name);
  const std::string full = join_path(base, name);
  if (!hard_path_exists(loc, name, file, base)) invalid(file, full, "does not exist");
  H5O_info_t info;
  check(H5Oget_info_by_name2(loc, std::string(name).c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT),
        "H5Oget_info_by_name2", file, full);
  return info.type;
}

OpenedDataset open_dataset(hid_t loc, std::string_view name, const std::string& file,
                           const std::string& base) {
  const std::string full = join_path(base, name);
  if (object_type(loc, name, file, base) != H5O_TYPE_DATASET) invalid(file, full, "is not a dataset");
  OpenedDataset d;
  d.dataset = H5Id(check_id(H5Dopen2(loc, std::string(name).c_str(), H5P_DEFAULT), "H5Dopen2",
                            file, full),
                   H5Id::Kind::dataset);
  d.type = H5Id(check_id(H5Dget_type(d.dataset.get()), "H5Dget_type", file, full),
                H5Id::Kind::datatype);
  d.space = H5Id(check_id(H5Dget_space(d.dataset.get()), "H5Dget_space", file, full),
                 H5Id::Kind::dataspace);
  return d;
}

std::string describe_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  std::string name;
  switch (cls) {
    case H5T_INTEGER: name = "integer"; break;
    case H5T_FLOAT: name = "float"; break;
    case H5T_STRING: name = "string"; break;
    default: name = "type class " + std::to_string(static_cast<int>(cls)); break;
  }
  return name + " of " + std::to_string(size) + " bytes";
}

Shape dataspace_shape(hid_t space, const std::string& file, const std::string& object) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail("H5Sget_simple_extent_ndims", file, object);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0) {
    fail("H5Sget_simple_extent_dims", file, object);
  }
  return Shape(dims.begin(), dims.end());
}

// Throws unless the dataset is chunked with the Fletcher32 filter (datasets HDF5 cannot
// chunk, scalars and empty ones, are exempt).
void require_checksum(const OpenedDataset& d, const Shape& shape, const std::string& file,
                      const std::string& object) {
  if (shape.empty() || mpitrain::numel(shape) == 0) return;
  H5Id dcpl(check_id(H5Dget_create_plist(d.dataset.get()), "H5Dget_create_plist", file, object),
            H5Id::Kind::plist);
  const int nfilters = H5Pget_nfilters(dcpl.get());
  if (nfilters < 0) fail("H5Pget_nfilters", file, object);
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0;
    std::size_t nelmts = 0;
    unsigned config = 0;
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nelmts,
                                           nullptr, 0, nullptr, &config);
    if (id < 0) fail("H5Pget_filter2", file, object);
    if (id == H5Z_FILTER_FLETCHER32) return;
  }
  invalid(file, object, "dataset has no Fletcher32 checksum filter");
}

H5Id verifying_transfer_plist(const std::string& file, const std::string& object) {
  H5Id dxpl = make_plist(H5P_DATASET_XFER, file, object);
  check(H5Pset_edc_check(dxpl.get(), H5Z_ENABLE_EDC), "H5Pset_edc_check", file, object);
  return dxpl;
}

H5Id open_attribute(hid_t obj, std::string_view name, const std::string& file,
                    const std::string& object) {
  const std::string n(name);
  const htri_t exists = H5Aexists(obj, n.c_str());
  if (exists < 0) fail("H5Aexists", file, object + "@" + n);
  if (exists == 0) invalid(file, object, "has no attribute '" + n + "'");
  return {check_id(H5Aopen(obj, n.c_str(), H5P_DEFAULT), "H5Aopen", file, object + "@" + n),
          H5Id::Kind::attribute};
}

// Throws unless the attribute holds exactly one element.
void require_single_element(hid_t attr, const std::string& file, const std::string& where) {
  H5Id space(check_id(H5Aget_space(attr), "H5Aget_space", file, where), H5Id::Kind::dataspace);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) fail("H5Sget_simple_extent_npoints", file, where);
  if (n != 1) invalid(file, where, "attribute holds " + std::to_string(n) + " values, not 1");
}

H5AttributeKind kind_of_type(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return H5AttributeKind::integer;
    case H5T_FLOAT: return H5AttributeKind::floating;
    case H5T_STRING: return H5AttributeKind::string;
    default: return H5AttributeKind::other;
  }
}

void write_scalar_attribute(hid_t obj, std::string_view name, hid_t file_type, hid_t mem_type,
                            const void* value, const std::string& file,
                            const std::string& object) {
  const std::string n(name);
  const std::string where = object + "@" + n;
  if (n.empty()) invalid(file, object, "empty attribute name");
  H5Id space(check_id(H5Screate(H5S_SCALAR), "H5Screate", file, where), H5Id::Kind::dataspace);
  H5Id acpl = make_plist(H5P_ATTRIBUTE_CREATE, file, where);
  check(H5Pset_char_encoding(acpl.get(), H5T_CSET_UTF8), "H5Pset_char_encoding", file, where);
  H5Id attr(check_id(H5Acreate2(obj, n.c_str(), file_type, space.get(), acpl.get(), H5P_DEFAULT),
                     "H5Acreate2", file, where),
            H5Id::Kind::attribute);
  check(H5Awrite(attr.get(), mem_type, value), "H5Awrite", file, where);
  check(attr.close(), "H5Aclose", file, where);
}

}  // namespace

bool is_valid_object_name(std::string_view name) noexcept {
  if (name.empty() || name.front() == '/' || name.back() == '/') return false;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

// ---- H5Id ------------------------------------------------------------------------------------

H5Id::H5Id(H5Id&& other) noexcept : id_(std::exchange(other.id_, -1)), kind_(other.kind_) {}

H5Id& H5Id::operator=(H5Id&& other) noexcept {
  if (this != &other) {
    close();
    id_ = std::exchange(other.id_, -1);
    kind_ = other.kind_;
  }
  return *this;
}

H5Id::~H5Id() { close(); }

int H5Id::close() noexcept {
  if (id_ < 0) return 0;
  const QuietErrors quiet;
  const hid_t id = std::exchange(id_, -1);
  switch (kind_) {
    case Kind::file: return H5Fclose(id);
    case Kind::group: return H5Gclose(id);
    case Kind::dataset: return H5Dclose(id);
    case Kind::dataspace: return H5Sclose(id);
    case Kind::datatype: return H5Tclose(id);
    case Kind::attribute: return H5Aclose(id);
    case Kind::plist: return H5Pclose(id);
  }
  return -1;
}

// ---- H5Object: attributes ---------------------------------------------------------------------

std::string H5Object::child_path(std::string_view name) const { return join_path(path_, name); }

bool H5Object::has_attribute(std::string_view name) const {
  const QuietErrors quiet;
  const std::string n(name);
  const htri_t exists = H5Aexists(id_.get(), n.c_str());
  if (exists < 0) fail("H5Aexists", file_, path_ + "@" + n);
  return exists > 0;
}

namespace {
herr_t collect_attribute_name(hid_t, const char* name, const H5A_info_t*, void* client) {
  static_cast<std::vector<std::string>*>(client)->emplace_back(name);
  return 0;
}
herr_t collect_link_name(hid_t, const char* name, const H5L_info_t*, void* client) {
  static_cast<std::vector<std::string>*>(client)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> H5Object::attribute_names() const {
  const QuietErrors quiet;
  std::vector<std::string> names;
  hsize_t idx = 0;
  check(H5Aiterate2(id_.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attribute_name, &names),
        "H5Aiterate2", file_, path_);
  return names;
}

H5AttributeKind H5Object::attribute_kind(std::string_view name) const {
  const QuietErrors quiet;
  const std::string where = path_ + "@" + std::string(name);
  H5Id attr = open_attribute(id_.get(), name, file_, path_);
  H5Id type(check_id(H5Aget_type(attr.get()), "H5Aget_type", file_, where), H5Id::Kind::datatype);
  return kind_of_type(type.get());
}

void H5Object::write_int64_attribute(std::string_view name, std::int64_t value) {
  const QuietErrors quiet;
  write_scalar_attribute(id_.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, file_, path_);
}

void H5Object::write_double_attribute(std::string_view name, double value) {
  const QuietErrors quiet;
  write_scalar_attribute(id_.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, file_, path_);
}

void H5Object::write_string_attribute(std::string_view name, std::string_view value) {
  const QuietErrors quiet;
  const std::string where = path_ + "@" + std::string(name);
  H5Id type = string_type(value.size(), file_, where);
  std::string padded(value);
  padded.resize(std::max<std::size_t>(value.size(), 1), '\0');
  write_scalar_attribute(id_.get(), name, type.get(), type.get(), padded.data(), file_, path_);
}

std::int64_t H5Object::read_int64_attribute(std::string_view name) const {
  const QuietErrors quiet;
  const std::string where = path_ + "@" + std::string(name);
  H5Id attr = open_attribute(id_.get(), name, file_, path_);
  H5Id type(check_id(H5Aget_type(attr.get()), "H5Aget_type", file_, where), H5Id::Kind::datatype);
  if (H5Tget_class(type.get()) != H5T_INTEGER) {
    invalid(file_, where, "expected an integer attribute, found " + describe_type(type.get()));
  }
  require_single_element(attr.get(), file_, where);
  std::int64_t value = 0;
  check(H5Aread(attr.get(), H5T_NATIVE_INT64, &value), "H5Aread", file_, where);
  return value;
}

double H5Object::read_double_attribute(std::string_view name) const {
  const QuietErrors quiet;
  const std::string where = path_ + "@" + std::string(name);
  H5Id attr = open_attribute(id_.get(), name, file_, path_);
  H5Id type(check_id(H5Aget_type(attr.get()), "H5Aget_type", file_, where), H5Id::Kind::datatype);
  if (H5Tget_class(type.get()) != H5T_FLOAT) {
    invalid(file_, where, "expected a float attribute, found " + describe_type(type.get()));
  }
  require_single_element(attr.get(), file_, where);
  double value = 0.0;
  check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value), "H5Aread", file_, where);
  return value;
}

std::string H5Object::read_string_attribute(std::string_view name) const {
  const QuietErrors quiet;
  const std::string where = path_ + "@" + std::string(name);
  H5Id attr = open_attribute(id_.get(), name, file_, path_);
  H5Id type(check_id(H5Aget_type(attr.get()), "H5Aget_type", file_, where), H5Id::Kind::datatype);
  if (H5Tget_class(type.get()) != H5T_STRING) {
    invalid(file_, where, "expected a string attribute, found " + describe_type(type.get()));
  }
  const htri_t variable = H5Tis_variable_str(type.get());
  if (variable < 0) fail("H5Tis_variable_str", file_, where);
  if (variable > 0) invalid(file_, where, "variable-length strings are not supported");
  require_single_element(attr.get(), file_, where);
  const std::size_t size = H5Tget_size(type.get());
  H5Id mem = string_type(size, file_, where);
  std::string value(size, '\0');
  check(H5Aread(attr.get(), mem.get(), value.data()), "H5Aread", file_, where);
  return strip_trailing_nuls(std::move(value));
}

// ---- H5Group --------------------------------------------------------------------------------

H5Group H5Group::create_group(std::string_view name) {
  const QuietErrors quiet;
  check_relative_name(file_, path_, name);
  const std::string full = child_path(name);
  H5Id lcpl = link_create_plist(file_, full);
  H5Id id(check_id(H5Gcreate2(id_.get(), std::string(name).c_str(), lcpl.get(), H5P_DEFAULT,
                              H5P_DEFAULT),
                   "H5Gcreate2", file_, full),
          H5Id::Kind::group);
  return H5Group(std::move(id), file_, full);
}

H5Group H5Group::require_group(std::string_view name) {
  if (contains(name)) return open_group(name);
  return create_group(name);
}

H5Group H5Group::open_group(std::string_view name) const {
  const QuietErrors quiet;
  const std::string full = child_path(name);
  if (object_type(id_.get(), name, file_, path_) != H5O_TYPE_GROUP) {
    invalid(file_, full, "is not a group");
  }
  H5Id id(check_id(H5Gopen2(id_.get(), std::string(name).c_str(), H5P_DEFAULT), "H5Gopen2", file_,
                   full),
          H5Id::Kind::group);
  return H5Group(std::move(id), file_, full);
}

bool H5Group::contains(std::string_view name) const {
  const QuietErrors quiet;
  check_relative_name(file_, path_, name);
  return hard_path_exists(id_.get(), name, file_, path_);
}

H5ChildKind H5Group::child_kind(std::string_view name) const {
  const QuietErrors quiet;
  switch (object_type(id_.get(), name, file_, path_)) {
    case H5O_TYPE_GROUP: return H5ChildKind::group;
    case H5O_TYPE_DATASET: return H5ChildKind::dataset;
    default: return H5ChildKind::other;
  }
}

std::vector<std::string> H5Group::child_names() const {
  const QuietErrors quiet;
  std::vector<std::string> names;
  hsize_t idx = 0;
  check(H5Literate(id_.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_link_name, &names),
        "H5Literate", file_, path_);
  return names;
}

void H5Group::write_tensor(std::string_view name, std::span<const float> data,
                           const Shape& shape, const DatasetOptions& options) {
  const QuietErrors quiet;
  check_relative_name(file_, path_, name);
  const std::string full = child_path(name);
  const std::size_t count = mpitrain::numel(shape);
  if (count != data.size()) {
    invalid(file_, full, std::to_string(data.size()) + " values cannot have shape " +
                             mpitrain::to_string(shape));
  }
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Id space(shape.empty()
                 ? check_id(H5Screate(H5S_SCALAR), "H5Screate", file_, full)
                 : check_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                            "H5Screate_simple", file_, full),
             H5Id::Kind::dataspace);
  H5Id dcpl = make_plist(H5P_DATASET_CREATE, file_, full);
  // Every element is written below, so HDF5 need not write fill values first.
  check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time", file_, full);
  std::vector<hsize_t> chunk;
  if (!shape.empty() && count > 0) {
    chunk = chunk_dims(shape, options.chunk_bytes);
    check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk",
          file_, full);
    check(H5Pset_fletcher32(dcpl.get()), "H5Pset_fletcher32", file_, full);
  }
  H5Id lcpl = link_create_plist(file_, full);
  H5Id dataset(check_id(H5Dcreate2(id_.get(), std::string(name).c_str(), H5T_IEEE_F32LE,
                                   space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                        "H5Dcreate2", file_, full),
               H5Id::Kind::dataset);
  if (options.direct_chunk_io && chunks_are_row_runs(chunk, shape)) {
    write_chunks_directly(dataset.get(), data, shape, chunk, file_, full);
  } else if (count > 0) {
    check(H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()),
          "H5Dwrite", file_, full + " (" + std::to_string(count) + " floats)");
  }
  check(dataset.close(), "H5Dclose", file_, full);
}

void H5Group::write_tensor(std::string_view name, const Tensor& tensor,
                           const DatasetOptions& options) {
  write_tensor(name, tensor.span(), tensor.shape(), options);
}

bool H5Group::is_tensor(std::string_view name) const {
  const QuietErrors quiet;
  if (child_kind(name) != H5ChildKind::dataset) return false;
  const OpenedDataset d = open_dataset(id_.get(), name, file_, path_);
  return H5Tget_class(d.type.get()) == H5T_FLOAT;
}

bool H5Group::is_string(std::string_view name) const {
  const QuietErrors quiet;
  if (child_kind(name) != H5ChildKind::dataset) return false;
  const OpenedDataset d = open_dataset(id_.get(), name, file_, path_);
  return H5Tget_class(d.type.get()) == H5T_STRING;
}

namespace {
// Returns the dataset opened and checked to be float32 with a checksum, and its shape.
std::pair<OpenedDataset, Shape> open_tensor(hid_t loc, std::string_view name,
                                                const std::string& file, const std::string& base) {
  const std::string full = join_path(base, name);
  OpenedDataset d = open_dataset(loc, name, file, base);
  if (H5Tget_class(d.type.get()) != H5T_FLOAT || H5Tget_size(d.type.get()) != sizeof(float)) {
    invalid(file, full, "expected float32 data, found " + describe_type(d.type.get()));
  }
  Shape shape = dataspace_shape(d.space.get(), file, full);
  require_checksum(d, shape, file, full);
  return {std::move(d), std::move(shape)};
}

// Returns the chunk shape when the dataset can be read chunk by chunk directly: little-endian
// float32, chunked in runs of whole rows, Fletcher32 its only filter. Empty otherwise.
std::vector<hsize_t> direct_read_layout(const OpenedDataset& d, const Shape& shape,
                                        const std::string& file, const std::string& object) {
  if (shape.empty() || mpitrain::numel(shape) == 0) return {};
  const htri_t le32 = H5Tequal(d.type.get(), H5T_IEEE_F32LE);
  if (le32 < 0) fail("H5Tequal", file, object);
  if (le32 == 0) return {};
  H5Id dcpl(check_id(H5Dget_create_plist(d.dataset.get()), "H5Dget_create_plist", file, object),
            H5Id::Kind::plist);
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED || H5Pget_nfilters(dcpl.get()) != 1) return {};
  std::vector<hsize_t> chunk(shape.size());
  if (H5Pget_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) !=
      static_cast<int>(chunk.size())) {
    fail("H5Pget_chunk", file, object);
  }
  return chunks_are_row_runs(chunk, shape) ? chunk : std::vector<hsize_t>{};
}

void read_float_data(const OpenedDataset& d, std::span<float> out, const Shape& shape,
                     const std::string& file, const std::string& object) {
  if (out.empty()) return;
  const std::vector<hsize_t> chunk = direct_read_layout(d, shape, file, object);
  if (!chunk.empty()) {
    read_chunks_directly(d.dataset.get(), out, shape, chunk, file, object);
    return;
  }
  H5Id dxpl = verifying_transfer_plist(file, object);
  check(H5Dread(d.dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, dxpl.get(), out.data()),
        "H5Dread", file, object + " (" + std::to_string(out.size()) + " floats)");
}
}  // namespace

Shape H5Group::tensor_shape(std::string_view name) const {
  const QuietErrors quiet;
  return open_tensor(id_.get(), name, file_, path_).second;
}

Tensor H5Group::read_tensor(std::string_view name) const {
  const QuietErrors quiet;
  auto [d, shape] = open_tensor(id_.get(), name, file_, path_);
  Tensor tensor = Tensor::uninitialized(shape);  // every value is read below
  read_float_data(d, tensor.span(), shape, file_, child_path(name));
  return tensor;
}

void H5Group::read_tensor_into(std::string_view name, std::span<float> out,
                               const Shape& expected_shape) const {
  const QuietErrors quiet;
  const std::string full = child_path(name);
  auto [d, shape] = open_tensor(id_.get(), name, file_, path_);
  if (shape != expected_shape) {
    invalid(file_, full, "stored shape " + mpitrain::to_string(shape) + " differs from expected " +
                             mpitrain::to_string(expected_shape));
  }
  if (out.size() != mpitrain::numel(shape)) {
    invalid(file_, full, "destination holds " + std::to_string(out.size()) + " values, shape " +
                             mpitrain::to_string(shape) + " needs " + std::to_string(mpitrain::numel(shape)));
  }
  read_float_data(d, out, shape, file_, full);
}

void H5Group::write_string(std::string_view name, std::string_view text) {
  const QuietErrors quiet;
  check_relative_name(file_, path_, name);
  const std::string full = child_path(name);
  H5Id type = string_type(text.size(), file_, full);
  const hsize_t one = 1;
  H5Id space(check_id(H5Screate_simple(1, &one, nullptr), "H5Screate_simple", file_, full),
             H5Id::Kind::dataspace);
  H5Id dcpl = make_plist(H5P_DATASET_CREATE, file_, full);
  check(H5Pset_chunk(dcpl.get(), 1, &one), "H5Pset_chunk", file_, full);
  check(H5Pset_fletcher32(dcpl.get()), "H5Pset_fletcher32", file_, full);
  H5Id lcpl = link_create_plist(file_, full);
  H5Id dataset(check_id(H5Dcreate2(id_.get(), std::string(name).c_str(), type.get(), space.get(),
                                   lcpl.get(), dcpl.get(), H5P_DEFAULT),
                        "H5Dcreate2", file_, full),
               H5Id::Kind::dataset);
  std::string padded(text);
  padded.resize(std::max<std::size_t>(text.size(), 1), '\0');
  check(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()),
        "H5Dwrite", file_, full);
  check(dataset.close(), "H5Dclose", file_, full);
}

std::string H5Group::read_string(std::string_view name) const {
  const QuietErrors quiet;
  const std::string full = child_path(name);
  OpenedDataset d = open_dataset(id_.get(), name, file_, path_);
  if (H5Tget_class(d.type.get()) != H5T_STRING) {
    invalid(file_, full, "expected a string dataset, found " + describe_type(d.type.get()));
  }
  const htri_t variable = H5Tis_variable_str(d.type.get());
  if (variable < 0) fail("H5Tis_variable_str", file_, full);
  if (variable > 0) invalid(file_, full, "variable-length strings are not supported");
  const Shape shape = dataspace_shape(d.space.get(), file_, full);
  if (shape != Shape{1}) {
    invalid(file_, full, "expected one string (shape [1]), found shape " + mpitrain::to_string(shape));
  }
  require_checksum(d, shape, file_, full);
  const std::size_t size = H5Tget_size(d.type.get());
  H5Id mem = string_type(size, file_, full);
  std::string value(size, '\0');
  H5Id dxpl = verifying_transfer_plist(file_, full);
  check(H5Dread(d.dataset.get(), mem.get(), H5S_ALL, H5S_ALL, dxpl.get(), value.data()), "H5Dread",
        file_, full);
  return strip_trailing_nuls(std::move(value));
}

// ---- H5File ---------------------------------------------------------------------------------

// The buffer HDF5's core driver grows for a created file, allocated, grown and freed through
// the callbacks below. When close() asks for it, the final release hands the buffer over
// instead of freeing it, so the file is written from it without a copy. (The buffer must be
// taken after H5Fclose, not before: closing is what clears the "open for writing" flags in
// the superblock, as H5Fget_file_image would in its copy.)
struct H5File::MemoryImage {
  H5ImageBuffer* buffer = nullptr;  // where the image lives: lent, or `own`
  H5ImageBuffer own;
  bool keep_on_close = false;  // close() asked HDF5 to hand the image over
  bool kept = false;           // HDF5 released the image at close; it is still in `buffer`
  bool memory_only = false;    // create_in_memory(): never written
};

namespace {

using MemoryImage = H5File::MemoryImage;

std::size_t page_round(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return std::max<std::size_t>((bytes + page - 1) / page * page, page);
}

// The core driver allocates, grows and frees the image through these callbacks.
void* image_malloc(std::size_t size, H5FD_file_image_op_t, void* udata) {
  auto* image = static_cast<MemoryImage*>(udata);
  try {
    return image->buffer->acquire(size);
  } catch (const std::exception&) {
    return nullptr;
  }
}

void* image_realloc(void* ptr, std::size_t size, H5FD_file_image_op_t op, void* udata) {
  auto* image = static_cast<MemoryImage*>(udata);
  if (ptr == nullptr) return image_malloc(size, op, udata);
  if (ptr != image->buffer->data()) return nullptr;  // not a buffer we handed out
  try {
    return image->buffer->grow(size);
  } catch (const std::exception&) {
    return nullptr;
  }
}

herr_t image_free(void* ptr, H5FD_file_image_op_t op, void* udata) {
  auto* image = static_cast<MemoryImage*>(udata);
  if (ptr == nullptr) return 0;
  if (ptr != image->buffer->data()) return -1;  // not a buffer we handed out
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && image->keep_on_close) {
    image->kept = true;
  } else {
    image->buffer->release();
  }
  return 0;
}

void* image_memcpy(void* dest, const void* src, std::size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(dest, src, size);
}

// HDF5 copies the access property list (and with it udata) into the file; all copies share
// the one MemoryImage owned by the H5File.
void* udata_copy(void* udata) { return udata; }
herr_t udata_free(void*) { return 0; }

H5Id file_access_plist(const std::string& file) {
  H5Id fapl = make_plist(H5P_FILE_ACCESS, file, "/");
  // A checkpoint file is written once inside a private folder and then only read, so
  // HDF5's advisory flock adds nothing and fails on file systems without flock (some NFS
  // and Lustre mounts).
  check(H5Pset_file_locking(fapl.get(), 0, 1), "H5Pset_file_locking", file, "/");
  return fapl;
}

}  // namespace

// ---- H5ImageBuffer ------------------------------------------------------------------------

H5ImageBuffer::~H5ImageBuffer() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

void* H5ImageBuffer::acquire(std::size_t bytes) {
  const std::size_t needed = page_round(bytes);
  if (needed > capacity_) {
    if (data_ != nullptr) ::munmap(data_, capacity_);
    data_ = nullptr;
    capacity_ = 0;
    // MAP_POPULATE: the kernel provides every page in one call instead of one fault each.
    void* p = ::mmap(nullptr, needed, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      throw H5Error("mmap of " + std::to_string(needed) + " bytes for a file image failed: " +
                    std::strerror(errno));
    }
    data_ = p;
    capacity_ = needed;
  }
  // Reused pages still hold the previous image. HDF5's core driver zeroes every region it
  // allocates before use (h5_file_test checks that no byte of a previous file leaks).
  in_use_ = true;
  return data_;
}

void* H5ImageBuffer::grow(std::size_t bytes) {
  const std::size_t needed = page_round(bytes);
  if (needed > capacity_) {
    void* p = ::mremap(data_, capacity_, needed, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) {
      throw H5Error("mremap to " + std::to_string(needed) + " bytes for a file image failed: " +
                    std::strerror(errno));
    }
    data_ = p;
    capacity_ = needed;
  }
  return data_;
}

void H5ImageBuffer::release() noexcept {
  if (data_ != nullptr && ::madvise(data_, capacity_, MADV_FREE) != 0) {
    ::madvise(data_, capacity_, MADV_DONTNEED);  // kernels before 4.5
  }
  in_use_ = false;
}

// ---- H5File ---------------------------------------------------------------------------------

H5File::H5File(H5Id id, std::filesystem::path path, std::unique_ptr<MemoryImage> image)
    : id_(std::move(id)), path_(std::move(path)), image_(std::move(image)) {}

H5File::H5File(H5File&& other) noexcept = default;

H5File& H5File::operator=(H5File&& other) noexcept {
  if (this != &other) {
    id_ = std::move(other.id_);  // closes our file first, while our image is still alive
    path_ = std::move(other.path_);
    image_ = std::move(other.image_);
  }
  return *this;
}

H5File::~H5File() { id_.close(); }

H5File H5File::create(const std::filesystem::path& path, std::size_t expected_bytes,
                      H5ImageBuffer* buffer) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(path, ec))) {
    throw H5Error("cannot create checkpoint file '" + path.string() + "': it exists");
  }
  auto image = std::make_unique<MemoryImage>();
  image->buffer = buffer != nullptr && !buffer->in_use() ? buffer : &image->own;
  return create_image(path, path.string(), expected_bytes, std::move(image));
}

H5File H5File::create_in_memory(std::string_view name) {
  auto image = std::make_unique<MemoryImage>();
  image->buffer = &image->own;
  image->memory_only = true;
  // HDF5 tells open core-driver files without a backing store apart by name (two open at
  // once under one name would be "the same file"); the image's address is unique while
  // the file is open.
  const std::string address = fmt::format("{}", static_cast<const void*>(image.get()));
  return create_image(std::filesystem::path(name),
                      std::string(name) + " (in memory at " + address + ")", 0, std::move(image));
}

H5File H5File::create_image(const std::filesystem::path& path, const std::string& hdf5_name,
                            std::size_t expected_bytes, std::unique_ptr<MemoryImage> image) {
  const QuietErrors quiet;
  const std::string file = path.string();
  H5Id fapl = file_access_plist(file);
  // One allocation for the expected content plus room for HDF5's metadata.
  constexpr std::size_t kMetadataRoom = std::size_t{1} << 20;
  check(H5Pset_fapl_core(fapl.get(), expected_bytes + kMetadataRoom, 0), "H5Pset_fapl_core", file,
        "/");
  // Closing the file closes whatever groups are still open in it, so close() gets the image
  // at once even while an H5Group of this file is alive.
  check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), "H5Pset_fclose_degree", file, "/");
  H5FD_file_image_callbacks_t callbacks{image_malloc, image_memcpy, image_realloc, image_free,
                                        udata_copy,   udata_free,   image.get()};
  check(H5Pset_file_image_callbacks(fapl.get(), &callbacks), "H5Pset_file_image_callbacks", file,
        "/");
  H5Id id(check_id(H5Fcreate(hdf5_name.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()),
                   "H5Fcreate", file, "/"),
          H5Id::Kind::file);
  return H5File(std::move(id), path, std::move(image));
}

H5File H5File::open_read_only(const std::filesystem::path& path) {
  const QuietErrors quiet;
  const std::string file = path.string();
  H5Id fapl = file_access_plist(file);
  H5Id id(check_id(H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl.get()), "H5Fopen", file, "/"),
          H5Id::Kind::file);
  return H5File(std::move(id), path, nullptr);
}

H5Group H5File::root() const {
  const QuietErrors quiet;
  const std::string file = path_.string();
  H5Id id(check_id(H5Gopen2(id_.get(), "/", H5P_DEFAULT), "H5Gopen2", file, "/"),
          H5Id::Kind::group);
  return H5Group(std::move(id), file, "/");
}

FileDigest H5File::close() {
  if (!id_.valid()) return {};
  const QuietErrors quiet;
  const std::string file = path_.string();
  if (!image_ || image_->memory_only) {
    check(id_.close(), "H5Fclose", file, "/");  // an in-memory image is freed with it
    image_.reset();
    return {};
  }
  // All metadata into the image; its size is then the size of the complete file.
  check(H5Fflush(id_.get(), H5F_SCOPE_GLOBAL), "H5Fflush", file, "/");
  const ssize_t size = H5Fget_file_image(id_.get(), nullptr, 0);
  if (size < 0) fail("H5Fget_file_image", file, "/");
  image_->keep_on_close = true;
  check(id_.close(), "H5Fclose", file, "/");  // memory only: no disk I/O can fail here
  const auto bytes = static_cast<std::size_t>(size);
  H5ImageBuffer& buffer = *image_->buffer;
  if (!image_->kept || bytes > buffer.capacity()) {
    throw H5Error("HDF5 core driver did not hand over the image of '" + file + "' (" +
                  std::to_string(bytes) + " bytes)");
  }
  FileDigest digest;
  try {
    DurableFileWriter writer(path_);
    writer.write({static_cast<const unsigned char*>(buffer.data()), bytes});
    digest = writer.finish();
  } catch (...) {
    buffer.release();
    throw;
  }
  buffer.release();
  image_.reset();
  return digest;
}

std::string hdf5_library_version() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace mpitrain::checkpoint
