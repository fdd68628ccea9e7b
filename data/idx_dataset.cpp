#include "mpitrain/data/idx_dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <memory>
#include <span>
#include <stdexcept>
#include <system_error>

namespace mpitrain::data {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // uint8 elements, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // uint8 elements, 1 dimension
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist/";

std::string hex32(std::uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) s += kDigits[(v >> shift) & 0xfu];
  return s;
}

struct GzClose {
  void operator()(gzFile_s* f) const noexcept { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzClose>;

// One IDX file being read: gzread in pieces of at most 1 GiB (its count is an unsigned int).
class IdxReader {
 public:
  IdxReader(const std::string& path, const char* what) : path_(path), what_(what) {
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      const int err = errno;
      fail("cannot open" + (err != 0 ? ": " + std::generic_category().message(err)
                                     : std::string(": out of memory")));
    }
  }

  // Returns how many bytes were read into `out` (fewer than out.size() only at end of file).
  std::size_t read(std::span<std::uint8_t> out) {
    std::size_t done = 0;
    while (done < out.size()) {
      const std::size_t piece = std::min<std::size_t>(out.size() - done, std::size_t{1} << 30);
      const int got = gzread(file_.get(), out.data() + done, static_cast<unsigned>(piece));
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_.get(), &errnum);
        fail(std::string("read error: ") + (errnum == Z_ERRNO
                                                ? std::generic_category().message(errno)
                                                : std::string(msg != nullptr ? msg : "?")));
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }

  // Reads exactly out.size() bytes; `total_expected` and `offset` give the message context.
  void read_exact(std::span<std::uint8_t> out, std::size_t offset, std::size_t total_expected) {
    const std::size_t got = read(out);
    if (got != out.size()) {
      fail("truncated: expected " + std::to_string(total_expected) + " bytes" + format_note() +
           ", got " + std::to_string(offset + got));
    }
  }

  // Reads the `bytes` payload bytes that follow a `header`-byte header into `out`, growing it
  // in pieces so that a corrupt header announcing terabytes fails as "truncated" instead of
  // allocating them up front. Pieces double from 1 MiB to 64 MiB: a short corrupt file fails
  // after zero-filling 1 MiB, not 64 MiB, and a large one is read in a few big pieces.
  void read_payload(std::vector<std::uint8_t>& out, std::size_t bytes, std::size_t header) {
    constexpr std::size_t kFirstPiece = std::size_t{1} << 20;
    constexpr std::size_t kMaxPiece = std::size_t{64} << 20;
    out.clear();
    while (out.size() < bytes) {
      const std::size_t done = out.size();
      const std::size_t piece = std::min({std::max(kFirstPiece, done), kMaxPiece, bytes - done});
      out.resize(done + piece);
      const std::size_t got = read(std::span<std::uint8_t>(out.data() + done, piece));
      if (got != piece) {
        fail("truncated: expected " + std::to_string(header + bytes) + " bytes" + format_note() +
             ", got " + std::to_string(header + done + got));
      }
    }
  }

  std::uint32_t read_be32(std::size_t offset, std::size_t header_bytes) {
    std::array<std::uint8_t, 4> b{};
    read_exact(b, offset, header_bytes);
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
           std::uint32_t{b[3]};
  }

  // Throws if anything follows the `expected` bytes the header announced.
  void expect_end(std::size_t expected) {
    std::array<std::uint8_t, 4096> extra{};
    std::size_t more = 0;
    for (std::size_t got; (got = read(extra)) > 0;) more += got;
    if (more > 0) {
      fail("longer than its header says: expected " + std::to_string(expected) + " bytes" +
           format_note() + ", got " + std::to_string(expected + more));
    }
  }

  void close() {
    const int rc = gzclose(file_.release());
    if (rc != Z_OK) fail("close failed (zlib error " + std::to_string(rc) + ")");
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("IDX " + std::string(what_) + " file '" + path_ + "': " + what);
  }

 private:
  std::string format_note() const {
    return file_ && gzdirect(file_.get()) == 0 ? " (after gzip decompression)" : "";
  }

  std::string path_;
  const char* what_;
  GzFile file_;
};

}  // namespace

IdxPaths fashion_mnist_train_paths() {
  return {std::string(kFashionMnistDir) + "train-images-idx3-ubyte.gz",
          std::string(kFashionMnistDir) + "train-labels-idx1-ubyte.gz"};
}

IdxPaths fashion_mnist_test_paths() {
  return {std::string(kFashionMnistDir) + "t10k-images-idx3-ubyte.gz",
          std::string(kFashionMnistDir) + "t10k-labels-idx1-ubyte.gz"};
}

IdxDataset::IdxDataset(const IdxPaths& paths, std::size_t num_classes)
    : paths_(paths), num_classes_(num_classes) {
  if (num_classes == 0 || num_classes > 256) {
    throw std::invalid_argument("IdxDataset: num_classes must be in [1, 256] (uint8 labels), got " +
                                std::to_string(num_classes));
  }
  {
    IdxReader in(paths.images, "images");
    constexpr std::size_t kHeader = 16;
    const std::uint32_t magic = in.read_be32(0, kHeader);
    if (magic != kImagesMagic) {
      in.fail("wrong magic number " + hex32(magic) + ", expected " + hex32(kImagesMagic) +
              " (uint8 images, 3 dimensions)");
    }
    count_ = in.read_be32(4, kHeader);
    rows_ = in.read_be32(8, kHeader);
    cols_ = in.read_be32(12, kHeader);
    // Three 32-bit extents: the product fits in 64 bits unless the header is corrupt.
    std::size_t pixels = 0;
    if (__builtin_mul_overflow(count_, rows_ * cols_, &pixels)) {
      in.fail("header announces " + std::to_string(count_) + " x " + std::to_string(rows_) + " x " +
              std::to_string(cols_) + " pixels, more than memory can address");
    }
    in.read_payload(pixels_, pixels, kHeader);
    in.expect_end(kHeader + pixels);
    in.close();
  }
  std::size_t label_count = 0;
  {
    IdxReader in(paths.labels, "labels");
    constexpr std::size_t kHeader = 8;
    const std::uint32_t magic = in.read_be32(0, kHeader);
    if (magic != kLabelsMagic) {
      in.fail("wrong magic number " + hex32(magic) + ", expected " + hex32(kLabelsMagic) +
              " (uint8 labels, 1 dimension)");
    }
    label_count = in.read_be32(4, kHeader);
    if (label_count != count_) {
      in.fail("holds " + std::to_string(label_count) + " labels but the images file '" +
              paths.images + "' holds " + std::to_string(count_) + " images");
    }
    in.read_payload(labels_, label_count, kHeader);
    in.expect_end(kHeader + label_count);
    in.close();
    for (std::size_t i = 0; i < labels_.size(); ++i) {
      if (labels_[i] >= num_classes) {
        in.fail("label " + std::to_string(labels_[i]) + " of example " + std::to_string(i) +
                " is out of range [0, " + std::to_string(num_classes) + ")");
      }
    }
  }
  feature_shape_ = {rows_ * cols_};
}

std::string IdxDataset::describe() const {
  return "IDX images '" + paths_.images + "' (" + std::to_string(count_) + " x " +
         std::to_string(rows_) + " x " + std::to_string(cols_) + "), labels '" + paths_.labels +
         "'";
}

void IdxDataset::read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                            std::span<std::int32_t> labels_out) const {
  // pixel / 255 in fp32, correctly rounded: what torchvision's ToTensor computes.
  std::array<float, 256> scale{};
  for (std::size_t v = 0; v < scale.size(); ++v) scale[v] = static_cast<float>(v) / 255.0f;
  const std::size_t d = rows_ * cols_;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::uint8_t* row = pixels_.data() + indices[i] * d;
    float* out = features_out.data() + i * d;
    for (std::size_t j = 0; j < d; ++j) out[j] = scale[row[j]];
    labels_out[i] = labels_[indices[i]];
  }
}

}  // namespace mpitrain::data
