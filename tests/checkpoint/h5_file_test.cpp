// H5File/H5Group: tensors, strings and attributes round-trip; the on-disk types, chunking
// and Fletcher32 filter are what h5_file.hpp promises (checked with the HDF5 C API); errors
// name file, object and call, and HDF5 prints nothing itself.

#include "mpitrain/checkpoint/h5_file.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "mpitrain/checkpoint/file_hash.hpp"

#include "checkpoint_test_util.hpp"

namespace mpitrain::checkpoint {
namespace {

using testing::closed_form_tensor;
using testing::TempDir;

// Returns (chunked, has Fletcher32) for a dataset, via the C API.
std::pair<bool, bool> layout_of(const std::filesystem::path& file, const char* object) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, object, H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(d);
  const bool chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
  bool fletcher = false;
  const int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0;
    std::size_t nelmts = 0;
    unsigned config = 0;
    if (H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nelmts, nullptr, 0, nullptr,
                       &config) == H5Z_FILTER_FLETCHER32) {
      fletcher = true;
    }
  }
  H5Pclose(dcpl);
  H5Dclose(d);
  H5Fclose(f);
  return {chunked, fletcher};
}

TEST(H5File, TensorsOfEveryShapeRoundTrip) {
  TempDir dir("h5");
  const auto path = dir.path() / "t.h5";
  const Tensor matrix = closed_form_tensor({37, 5}, 1.0f);
  const Tensor vector = closed_form_tensor({11}, 2.0f);
  const Tensor scalar = closed_form_tensor({}, 3.0f);
  const Tensor empty = closed_form_tensor({0, 4}, 0.0f);
  const Tensor cube = closed_form_tensor({3, 4, 5}, 4.0f);
  {
    H5File file = H5File::create(path);
    H5Group root = file.root();
    // Small chunks force many chunks per dataset, and a split inside the trailing rows.
    const DatasetOptions small{.chunk_bytes = 64};
    root.write_tensor("0.weight", matrix, small);
    root.write_tensor("nested/0.bias", vector, small);
    root.write_tensor("scalar", scalar);
    root.write_tensor("empty", empty);
    root.write_tensor("cube", cube, DatasetOptions{.chunk_bytes = 8});
    file.close();
  }
  H5File file = H5File::open_read_only(path);
  const H5Group root = file.root();
  const auto check = [&](const char* name, const Tensor& expected) {
    const Tensor got = root.read_tensor(name);
    ASSERT_EQ(got.shape(), expected.shape()) << name;
    for (std::size_t i = 0; i < expected.numel(); ++i) ASSERT_EQ(got[i], expected[i]) << name;
  };
  check("0.weight", matrix);
  check("nested/0.bias", vector);
  check("scalar", scalar);
  check("empty", empty);
  check("cube", cube);
  EXPECT_EQ(root.tensor_shape("0.weight"), (Shape{37, 5}));
  EXPECT_EQ(root.child_names(), (std::vector<std::string>{"0.weight", "cube", "empty", "nested",
                                                          "scalar"}));
  EXPECT_EQ(root.child_kind("nested"), H5ChildKind::group);
  EXPECT_TRUE(root.is_tensor("nested/0.bias"));
  EXPECT_TRUE(root.contains("nested/0.bias"));
  EXPECT_FALSE(root.contains("nested/0.weight"));

  Tensor into({37, 5});
  root.read_tensor_into("0.weight", into.span(), {37, 5});
  EXPECT_EQ(into[36 * 5 + 4], matrix[36 * 5 + 4]);
  EXPECT_THROW(root.read_tensor_into("0.weight", into.span(), {5, 37}), H5Error);
}

TEST(H5File, OnDiskLayoutIsFloat32ChunkedWithFletcher32) {
  TempDir dir("h5");
  const auto path = dir.path() / "t.h5";
  {
    H5File file = H5File::create(path);
    H5Group root = file.root();
    root.write_tensor("w", closed_form_tensor({100, 7}, 0.0f), DatasetOptions{.chunk_bytes = 1024});
    root.write_tensor("s", closed_form_tensor({}, 0.0f));
    root.write_tensor("e", closed_form_tensor({0}, 0.0f));
    root.write_string("config", "a: 1\n");
    file.close();
  }
  EXPECT_EQ(layout_of(path, "/w"), std::make_pair(true, true));
  EXPECT_EQ(layout_of(path, "/config"), std::make_pair(true, true));
  // HDF5 cannot chunk scalar or empty datasets: no filter there (documented).
  EXPECT_EQ(layout_of(path, "/s"), std::make_pair(false, false));
  EXPECT_EQ(layout_of(path, "/e"), std::make_pair(false, false));

  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, "/w", H5P_DEFAULT);
  const hid_t type = H5Dget_type(d);
  EXPECT_GT(H5Tequal(type, H5T_IEEE_F32LE), 0);
  const hid_t dcpl = H5Dget_create_plist(d);
  hsize_t chunk[2] = {};
  ASSERT_EQ(H5Pget_chunk(dcpl, 2, chunk), 2);
  // 1024 bytes = 256 floats = 36 whole rows of 7.
  EXPECT_EQ(chunk[0], 36u);
  EXPECT_EQ(chunk[1], 7u);
  H5Pclose(dcpl);
  H5Tclose(type);
  H5Dclose(d);
  H5Fclose(f);
}

TEST(H5File, AttributesAndStringsRoundTrip) {
  TempDir dir("h5");
  const auto path = dir.path() / "a.h5";
  const std::string yaml = "seed: 0\nmodel: {kind: mlp}\n\xc3\xa9t\xc3\xa9\n";  // UTF-8
  {
    H5File file = H5File::create(path);
    H5Group root = file.root();
    root.write_int64_attribute("world_size", 3);
    root.write_int64_attribute("big", (std::int64_t{1} << 62) + 5);
    root.write_double_attribute("lr", 1.0e-3);
    root.write_string_attribute("version", "0.1.0");
    root.write_string_attribute("empty", "");
    root.write_string("config", yaml);
    root.write_string("blank", "");
    H5Group g = root.create_group("optimizer/0.weight");
    g.write_double_attribute("step", 7.0);
    EXPECT_THROW(root.write_int64_attribute("world_size", 4), H5Error);
    file.close();
  }
  H5File file = H5File::open_read_only(path);
  const H5Group root = file.root();
  EXPECT_EQ(root.read_int64_attribute("world_size"), 3);
  EXPECT_EQ(root.read_int64_attribute("big"), (std::int64_t{1} << 62) + 5);
  EXPECT_EQ(root.read_double_attribute("lr"), 1.0e-3);
  EXPECT_EQ(root.read_string_attribute("version"), "0.1.0");
  EXPECT_EQ(root.read_string_attribute("empty"), "");
  EXPECT_EQ(root.read_string("config"), yaml);
  EXPECT_EQ(root.read_string("blank"), "");
  EXPECT_TRUE(root.is_string("config"));
  EXPECT_EQ(root.open_group("optimizer/0.weight").read_double_attribute("step"), 7.0);
  EXPECT_EQ(root.attribute_names(),
            (std::vector<std::string>{"big", "empty", "lr", "version", "world_size"}));
  EXPECT_EQ(root.attribute_kind("lr"), H5AttributeKind::floating);
  EXPECT_EQ(root.attribute_kind("big"), H5AttributeKind::integer);
  EXPECT_EQ(root.attribute_kind("version"), H5AttributeKind::string);
  // Type classes are checked, not converted.
  EXPECT_THROW(root.read_double_attribute("world_size"), H5Error);
  EXPECT_THROW(root.read_int64_attribute("lr"), H5Error);
}

TEST(H5File, ErrorsNameFileObjectAndCallAndHdf5PrintsNothing) {
  TempDir dir("h5");
  const auto path = dir.path() / "e.h5";
  {
    H5File file = H5File::create(path);
    H5Group root = file.root();
    root.write_tensor("model/0.weight", closed_form_tensor({2, 2}, 0.0f));
    ::testing::internal::CaptureStderr();
    try {
      root.write_tensor("model/0.weight", closed_form_tensor({2, 2}, 0.0f));
      ADD_FAILURE() << "writing a dataset twice must fail";
    } catch (const H5Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("H5Dcreate2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("/model/0.weight"), std::string::npos) << msg;
      EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    }
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    file.close();
  }
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(H5File::create(path), H5Error);  // exists
  try {
    H5File::open_read_only(dir.path() / "missing.h5");
    ADD_FAILURE() << "opening a missing file must fail";
  } catch (const H5Error& e) {
    EXPECT_NE(std::string(e.what()).find("H5Fopen"), std::string::npos) << e.what();
  }
  H5File file = H5File::open_read_only(path);
  try {
    (void)file.root().read_tensor("model/0.bias");
    ADD_FAILURE() << "reading a missing dataset must fail";
  } catch (const H5Error& e) {
    EXPECT_NE(std::string(e.what()).find("/model/0.bias"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)file.root().read_string("model/0.weight"), H5Error);
  EXPECT_THROW((void)file.root().open_group("model/0.weight"), H5Error);
  EXPECT_THROW((void)file.root().read_tensor("../x"), H5Error);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(H5File, ReaderVerifiesFletcher32OfTensorData) {
  // Bypasses the manifest on purpose: this is the second line of defence, HDF5's own
  // per-chunk checksum, which must turn a flipped bit into an error.
  TempDir dir("h5");
  const auto path = dir.path() / "c.h5";
  {
    H5File file = H5File::create(path);
    H5Group root = file.root();
    root.write_tensor("w", closed_form_tensor({64, 64}, 1.0f), DatasetOptions{.chunk_bytes = 4096});
    file.close();
  }
  testing::flip_byte(path, testing::first_chunk_offset(path, "/w") + 100);
  H5File file = H5File::open_read_only(path);
  try {
    (void)file.root().read_tensor("w");
    ADD_FAILURE() << "a flipped bit in tensor data must be detected";
  } catch (const H5Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/w (chunk at row 0)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Fletcher32"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  }
  // HDF5's own filter pipeline rejects the same chunk: the checksum we store is HDF5's.
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, "/w", H5P_DEFAULT);
  std::vector<float> values(64 * 64);
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &func, &data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  EXPECT_LT(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Eset_auto2(H5E_DEFAULT, func, data);
  H5Dclose(d);
  H5Fclose(f);
}

TEST(H5File, DirectChunkIoAndHdf5FilterPipelineAgree) {
  TempDir dir("h5");
  const auto path = dir.path() / "d.h5";
  // 37 rows of 5 in chunks of 3 rows: 13 chunks, the last one partial.
  const Tensor values = closed_form_tensor({37, 5}, 0.5f);
  {
    H5File file = H5File::create(path);
    H5Group root = file.root();
    root.write_tensor("direct", values, DatasetOptions{.chunk_bytes = 64});
    root.write_tensor("pipeline", values,
                      DatasetOptions{.chunk_bytes = 64, .direct_chunk_io = false});
    file.close();
  }
  // What we wrote directly, HDF5's pipeline reads with its own checksum verification.
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_edc_check(dxpl, H5Z_ENABLE_EDC);
  for (const char* name : {"/direct", "/pipeline"}) {
    const hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    std::vector<float> got(values.numel());
    EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, dxpl, got.data()), 0) << name;
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], values[i]) << name << i;
    H5Dclose(d);
  }
  H5Pclose(dxpl);
  H5Fclose(f);
  // What HDF5's pipeline wrote, our direct reader reads and verifies.
  H5File file = H5File::open_read_only(path);
  for (const char* name : {"direct", "pipeline"}) {
    const Tensor got = file.root().read_tensor(name);
    for (std::size_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got[i], values[i]) << name << i;
  }
}

TEST(H5File, RefusesDatasetsWithoutChecksumAndOtherTypes) {
  TempDir dir("h5");
  const auto path = dir.path() / "foreign.h5";
  // A file as another tool might write it: contiguous float32 and float64 datasets.
  {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[1] = {4};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const float values[4] = {1, 2, 3, 4};
    const hid_t d = H5Dcreate2(f, "plain", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
    H5Dclose(d);
    const hid_t d64 = H5Dcreate2(f, "double", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                 H5P_DEFAULT);
    H5Dwrite(d64, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
    H5Dclose(d64);
    H5Lcreate_soft("/plain", f, "soft", H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(space);
    H5Fclose(f);
  }
  H5File file = H5File::open_read_only(path);
  const H5Group root = file.root();
  try {
    (void)root.read_tensor("plain");
    ADD_FAILURE() << "a tensor without checksum must be refused";
  } catch (const H5Error& e) {
    EXPECT_NE(std::string(e.what()).find("Fletcher32"), std::string::npos) << e.what();
  }
  try {
    (void)root.read_tensor("double");
    ADD_FAILURE() << "float64 data must be refused";
  } catch (const H5Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
  }
  try {
    (void)root.read_tensor("soft");
    ADD_FAILURE() << "soft links must not be followed";
  } catch (const H5Error& e) {
    EXPECT_NE(std::string(e.what()).find("link"), std::string::npos) << e.what();
  }
}

TEST(H5File, ImageBufferIsReusedWithoutLeakingTheLastFile) {
  TempDir dir("h5");
  H5ImageBuffer buffer;
  // A first file whose every data byte is 0xAB, then a smaller one in the same buffer.
  Tensor marked({256, 1024});
  std::memset(marked.data(), 0xAB, marked.numel() * sizeof(float));
  {
    H5File file = H5File::create(dir.path() / "first.h5", marked.numel() * sizeof(float), &buffer);
    EXPECT_TRUE(buffer.in_use());
    H5Group root = file.root();
    root.write_tensor("marked", marked);
    const FileDigest digest = file.close();
    EXPECT_EQ(digest.bytes, std::filesystem::file_size(dir.path() / "first.h5"));
    EXPECT_EQ(digest.xxh3_128, hash_file(dir.path() / "first.h5").xxh3_128);
  }
  EXPECT_FALSE(buffer.in_use());
  const void* mapping = buffer.data();
  {
    H5File file = H5File::create(dir.path() / "second.h5", 4096, &buffer);
    EXPECT_EQ(buffer.data(), mapping);  // same pages
    H5Group root = file.root();
    root.write_tensor("small", closed_form_tensor({16}, 1.0f));
    // HDF5 zeroed all it allocated, which covers where the first file's data was.
    const auto* bytes = static_cast<const char*>(buffer.data());
    const std::string_view image(bytes, std::min<std::size_t>(buffer.capacity(), 2u << 20));
    EXPECT_EQ(image.find(std::string(16, '\xAB')), std::string_view::npos);
    file.close();
  }
  const std::string bytes = testing::read_file(dir.path() / "second.h5");
  EXPECT_EQ(bytes.find(std::string(16, '\xAB')), std::string::npos) << "stale image bytes";
  H5File file = H5File::open_read_only(dir.path() / "second.h5");
  EXPECT_EQ(file.root().read_tensor("small")[15], 1.0f + 15.0f / 8.0f);
  EXPECT_EQ(file.root().child_names(), std::vector<std::string>{"small"});
  // A file never closed is never written, and gives the buffer back.
  {
    H5File abandoned = H5File::create(dir.path() / "abandoned.h5", 0, &buffer);
    abandoned.root().write_tensor("x", closed_form_tensor({4}, 0.0f));
  }
  EXPECT_FALSE(buffer.in_use());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "abandoned.h5"));
}

}  // namespace
}  // namespace mpitrain::checkpoint
