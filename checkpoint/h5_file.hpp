#pragma once
// RAII wrappers around the HDF5 C API, for checkpoint files.
//
// - Every HDF5 identifier (file, group, dataset, dataspace, datatype, attribute, property
//   list) is owned by one H5Id and closed by its destructor.
// - Every return code is checked; a failure throws H5Error naming the file, the object path
//   inside it, the HDF5 call, and the innermost messages of HDF5's error stack.
// - HDF5 prints its error stack to stderr by default. Each wrapper call runs with that
//   automatic printing switched off for the calling thread's default error stack (saved and
//   restored around the call by a scope guard, so a host program's own H5Eset_auto2 setting
//   is untouched); the stack is read with H5Ewalk2 into the exception message instead.
// - fp32 tensors are stored as little-endian IEEE float32 datasets with the tensor's shape,
//   in a chunked layout with the Fletcher32 checksum filter. HDF5 cannot chunk a dataset with
//   zero elements or a scalar (0-d) dataspace, so those carry no filter (the file-level
//   XXH3-128 hash in MANIFEST.json still covers them). Readers require the filter on every
//   other tensor dataset and verify every chunk's checksum, so a flipped bit in tensor data
//   is an error, never a silently wrong value. Tensor chunks are written and read directly
//   with our own (faster) Fletcher32; any HDF5 reader still verifies them with its own.
// - Strings are fixed-length UTF-8, NUL-padded (trailing NUL bytes are not preserved), stored
//   as one-element chunked datasets (with Fletcher32) or as scalar attributes.
// - Links are followed only when they are hard links: soft and external links in a file are
//   refused, so reading a checkpoint never opens another file.
//
// Names may contain dots ("0.weight"); '/' separates path components.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/file_hash.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::checkpoint {

class H5Error : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// One HDF5 identifier and the function that closes it. (hid_t is int64_t in HDF5 1.10 and
// later; h5_file.cpp checks that, so this header does not need <hdf5.h>.)
class H5Id {
 public:
  enum class Kind : std::uint8_t { file, group, dataset, dataspace, datatype, attribute, plist };

  H5Id() = default;
  H5Id(std::int64_t id, Kind kind) noexcept : id_(id), kind_(kind) {}
  H5Id(H5Id&& other) noexcept;
  H5Id& operator=(H5Id&& other) noexcept;
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id();

  std::int64_t get() const noexcept { return id_; }
  bool valid() const noexcept { return id_ >= 0; }
  // Closes the identifier now; returns the HDF5 status (negative on failure).
  int close() noexcept;

 private:
  std::int64_t id_ = -1;
  Kind kind_ = Kind::plist;
};

// What an attribute holds, as far as the checkpoint format cares.
enum class H5AttributeKind : std::uint8_t { integer, floating, string, other };
// What a link inside a group points to.
enum class H5ChildKind : std::uint8_t { group, dataset, other };

// Tuning of tensor datasets. A chunk is a run of whole rows (leading dimension split only)
// of about chunk_bytes; a few MiB keep HDF5's per-chunk overhead small next to the I/O.
struct DatasetOptions {
  std::size_t chunk_bytes = std::size_t{4} << 20;
  // Write and read chunks directly (H5Dwrite_chunk / H5Dread_chunk) with our own Fletcher32
  // (fletcher32.hpp, bit-identical to HDF5's, about 4x faster) instead of HDF5's filter
  // pipeline. The file is the same either way; false exists to test that.
  bool direct_chunk_io = true;
};

// A group or a dataset: attributes and naming shared by both.
class H5Object {
 public:
  // Returns the file this object lives in, as given when it was opened.
  const std::string& file_name() const noexcept { return file_; }
  // Returns the absolute path of the object inside the file ("/optimizer/0.weight").
  const std::string& path() const noexcept { return path_; }
  // Returns the raw hid_t, for callers who need the C API directly.
  std::int64_t id() const noexcept { return id_.get(); }

  bool has_attribute(std::string_view name) const;
  // Returns the attribute names in increasing name order.
  std::vector<std::string> attribute_names() const;
  H5AttributeKind attribute_kind(std::string_view name) const;

  // Each writes a new scalar attribute; writing an existing name is an error.
  void write_int64_attribute(std::string_view name, std::int64_t value);
  void write_double_attribute(std::string_view name, double value);
  void write_string_attribute(std::string_view name, std::string_view value);

  // Each returns the attribute's value; the stored type class must match (integer, float,
  // fixed-length string), otherwise H5Error names the attribute and what it holds.
  std::int64_t read_int64_attribute(std::string_view name) const;
  double read_double_attribute(std::string_view name) const;
  std::string read_string_attribute(std::string_view name) const;

 protected:
  H5Object(H5Id id, std::string file, std::string path)
      : id_(std::move(id)), file_(std::move(file)), path_(std::move(path)) {}
  // Returns the absolute path of `name` relative to this object.
  std::string child_path(std::string_view name) const;

  H5Id id_;
  std::string file_;
  std::string path_;
};

class H5Group : public H5Object {
 public:
  // Returns a new group at `name` (a relative path; missing intermediate groups are created).
  H5Group create_group(std::string_view name);
  // Returns the group at `name` if it exists, otherwise creates it (and its parents).
  H5Group require_group(std::string_view name);
  // Returns the existing group at `name` (relative path of hard links only).
  H5Group open_group(std::string_view name) const;

  // Returns true when every component of the relative path `name` exists as a hard link.
  bool contains(std::string_view name) const;
  // Returns what `name` is (it must exist).
  H5ChildKind child_kind(std::string_view name) const;
  // Returns the names of the direct children in increasing name order.
  std::vector<std::string> child_names() const;

  // Writes a float32 dataset of the given shape (data: numel(shape) values, row-major).
  void write_tensor(std::string_view name, std::span<const float> data, const Shape& shape,
                    const DatasetOptions& options = {});
  void write_tensor(std::string_view name, const Tensor& tensor,
                    const DatasetOptions& options = {});
  // Returns true when `name` is a dataset of floating-point type class.
  bool is_tensor(std::string_view name) const;
  // Returns the shape of the float32 dataset `name`.
  Shape tensor_shape(std::string_view name) const;
  // Returns the float32 dataset `name` as an owning tensor, checksum verified.
  Tensor read_tensor(std::string_view name) const;
  // Reads the float32 dataset `name` into `out`, whose shape must equal the stored one
  // (H5Error names both shapes otherwise).
  void read_tensor_into(std::string_view name, std::span<float> out,
                        const Shape& expected_shape) const;

  // Writes a string dataset; `read_string` returns it.
  void write_string(std::string_view name, std::string_view text);
  std::string read_string(std::string_view name) const;
  // Returns true when `name` is a dataset of string type class.
  bool is_string(std::string_view name) const;

 private:
  friend class H5File;
  H5Group(H5Id id, std::string file, std::string path)
      : H5Object(std::move(id), std::move(file), std::move(path)) {}
};

// Memory for the images of files being written (see H5File), kept from one file to the next
// so that periodic checkpoints reuse their pages instead of faulting in new ones (on a
// virtual machine, mapping 600 MB of fresh pages takes about 0.25 s; reusing them 0.04 s).
// Between files the pages are released with MADV_FREE: the kernel takes them back under
// memory pressure, otherwise they stay (and count in the resident size). One file at a time.
class H5ImageBuffer {
 public:
  H5ImageBuffer() = default;
  ~H5ImageBuffer();
  H5ImageBuffer(const H5ImageBuffer&) = delete;
  H5ImageBuffer& operator=(const H5ImageBuffer&) = delete;

  // Returns at least `bytes` bytes; reused ones still hold the previous content (HDF5's core
  // driver zeroes what it allocates).
  void* acquire(std::size_t bytes);
  // Returns the region grown to at least `bytes`, content preserved (it may move).
  void* grow(std::size_t bytes);
  // Gives the pages back lazily (MADV_FREE); the mapping stays for the next acquire().
  void release() noexcept;

  void* data() const noexcept { return data_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool in_use() const noexcept { return in_use_; }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;  // bytes mapped, a multiple of the page size
  bool in_use_ = false;
};

// A file being written is built in memory (HDF5's core driver, no backing store) and
// written to disk by close() with plain large writes and an fsync. So every disk error
// (ENOSPC, EFBIG, EIO) is raised by our own write(2), never inside HDF5: HDF5 1.10 cannot
// recover from a failed flush in H5Fclose (the file identifier stays registered half
// destroyed and the library crashes when it terminates at exit). The cost is memory for one
// file image while writing. Files opened for reading use the POSIX (sec2) driver.
class H5File {
 public:
  // Returns a new, empty file that close() will write to `path`; `path` must not exist.
  // `expected_bytes` sizes the in-memory image (the tensor bytes to come), so it is
  // allocated once. The image lives in `buffer` when one is lent (and not in use by another
  // file); otherwise in memory of its own, unmapped after close().
  static H5File create(const std::filesystem::path& path, std::size_t expected_bytes = 0,
                       H5ImageBuffer* buffer = nullptr);
  // Returns a new, empty file that lives in memory only: nothing is ever written to disk,
  // close() and the destructor discard it. For in-memory copies of state (e.g. a snapshot of
  // a registered object to roll back to). `name` appears in error messages only; files open
  // at the same time may share it.
  static H5File create_in_memory(std::string_view name);
  // Returns the existing file at `path`, opened read-only.
  static H5File open_read_only(const std::filesystem::path& path);

  H5File(H5File&& other) noexcept;
  H5File& operator=(H5File&& other) noexcept;
  // Closes silently; a created file that was not close()d is never written.
  ~H5File();

  const std::filesystem::path& path() const noexcept { return path_; }
  // Returns the root group "/".
  H5Group root() const;
  // A file of create_in_memory(): discards it and returns an empty digest.
  // A created file: flushes HDF5's metadata into the image, writes the image to path()
  // (new file, written then fsynced) and releases it; groups of the file still open are
  // closed with it (using them afterwards is an error). Returns the written file's size and
  // XXH3-128, computed from the bytes as they are written. A read-only file: closes it and
  // returns an empty digest. Throws CheckpointError on failure; the caller removes a partial
  // file.
  FileDigest close();

  struct MemoryImage;  // the in-memory file image of a created file

 private:
  H5File(H5Id id, std::filesystem::path path, std::unique_ptr<MemoryImage> image);
  // Returns a new core-driver file over `image`, known to HDF5 as `hdf5_name`.
  static H5File create_image(const std::filesystem::path& path, const std::string& hdf5_name,
                             std::size_t expected_bytes, std::unique_ptr<MemoryImage> image);
  // Order matters: the HDF5 file (whose close releases the image through callbacks) is
  // closed before the image bookkeeping is freed.
  H5Id id_;
  std::filesystem::path path_;
  std::unique_ptr<MemoryImage> image_;
};

// Returns the HDF5 library's version ("1.10.8").
std::string hdf5_library_version();

// Returns true when `name` can name an object inside a group of a checkpoint file: not empty,
// no leading or trailing '/', and no empty, "." or ".." component between slashes (HDF5 would
// read those as other paths). The engine checks parameter and buffer names with it when they
// are registered, so that a bad name fails there rather than at the first save.
bool is_valid_object_name(std::string_view name) noexcept;

}  // namespace mpitrain::checkpoint
