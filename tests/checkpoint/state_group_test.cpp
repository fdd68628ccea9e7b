// StateGroup: the mapping of keys to datasets and attributes (nested keys, dotted names),
// conversion from and to StateDict, and structure checks with readable messages.

#include "mpitrain/checkpoint/state_group.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include "checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"

namespace mpitrain::checkpoint {
namespace {

using testing::closed_form_tensor;
using testing::TempDir;

StateGroup optimizer_like() {
  StateGroup g;
  g.tensors["0.weight/exp_avg"] = closed_form_tensor({3, 2}, 1.0f);
  g.tensors["0.weight/exp_avg_sq"] = closed_form_tensor({3, 2}, 2.0f);
  g.tensors["layers.1.bias/momentum_buffer"] = closed_form_tensor({2}, 3.0f);
  g.tensors["scalar_tensor"] = closed_form_tensor({}, 4.0f);
  g.scalars["lr"] = 0.5;
  g.scalars["0.weight/step"] = 12.0;
  g.integers["layers.1.bias/count"] = -3;
  g.integers["total"] = 99;
  g.strings["note"] = "dots.are.fine";
  return g;
}

TEST(StateGroup, WriteReadRoundTripWithNestedAndDottedKeys) {
  TempDir dir("sg");
  const auto path = dir.path() / "g.h5";
  const StateGroup written = optimizer_like();
  {
    H5File file = H5File::create(path);
    H5Group root = file.root();
    H5Group g = root.create_group("optimizer");
    write_state_group(g, written);
    file.close();
  }
  // The mapping is the documented one: checked with the C API.
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GT(H5Lexists(f, "/optimizer/0.weight", H5P_DEFAULT), 0);
  EXPECT_GT(H5Lexists(f, "/optimizer/0.weight/exp_avg", H5P_DEFAULT), 0);
  EXPECT_GT(H5Lexists(f, "/optimizer/layers.1.bias/momentum_buffer", H5P_DEFAULT), 0);
  EXPECT_GT(H5Aexists_by_name(f, "/optimizer/0.weight", "step", H5P_DEFAULT), 0);
  EXPECT_GT(H5Aexists_by_name(f, "/optimizer", "lr", H5P_DEFAULT), 0);
  EXPECT_GT(H5Aexists_by_name(f, "/optimizer/layers.1.bias", "count", H5P_DEFAULT), 0);
  H5Fclose(f);

  H5File file = H5File::open_read_only(path);
  const StateGroup read = read_state_group(file.root().open_group("optimizer"));
  ASSERT_EQ(read.tensors.size(), written.tensors.size());
  for (const auto& [key, tensor] : written.tensors) {
    const Tensor& got = read.tensors.at(key);
    ASSERT_EQ(got.shape(), tensor.shape()) << key;
    for (std::size_t i = 0; i < tensor.numel(); ++i) EXPECT_EQ(got[i], tensor[i]) << key;
  }
  EXPECT_EQ(read.scalars, written.scalars);
  EXPECT_EQ(read.integers, written.integers);
  EXPECT_EQ(read.strings, written.strings);
  EXPECT_NO_THROW(check_same_structure(read, written, "optimizer"));
}

TEST(StateGroup, ViewsAreWrittenWithoutCopyingAndStateDictsConvert) {
  std::vector<float> live = {1.5f, -2.0f, 3.25f, 4.0f};
  StateDict dict;
  dict.tensors["w"] = Tensor::view(live, {2, 2});
  dict.scalars["lr"] = 0.1;
  StateGroup g = StateGroup::from_state_dict(std::move(dict));
  EXPECT_TRUE(g.tensors.at("w").is_view());
  EXPECT_EQ(g.tensors.at("w").data(), live.data());
  g.integers["step"] = 5;
  StateDict back = std::move(g).to_state_dict();
  EXPECT_EQ(back.scalars.at("step"), 5.0);
  EXPECT_EQ(back.scalars.at("lr"), 0.1);

  StateGroup with_string;
  with_string.strings["s"] = "x";
  EXPECT_THROW((void)std::move(with_string).to_state_dict(), CheckpointError);
}

TEST(StateGroup, StructureCheckNamesKeysAndBothShapes) {
  const StateGroup expected = optimizer_like();
  StateGroup loaded = optimizer_like();
  loaded.tensors["0.weight/exp_avg"] = closed_form_tensor({2, 3}, 0.0f);
  loaded.tensors.erase("layers.1.bias/momentum_buffer");
  loaded.scalars["momentum"] = 0.9;
  try {
    check_same_structure(loaded, expected, "checkpoint group /optimizer");
    ADD_FAILURE() << "mismatches must be reported";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("checkpoint group /optimizer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'0.weight/exp_avg' has shape [2, 3] in the checkpoint but [3, 2] here"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("missing tensor 'layers.1.bias/momentum_buffer'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected scalar 'momentum'"), std::string::npos) << msg;
  }

  StateDict live;
  live.tensors["0.weight"] = closed_form_tensor({4, 3}, 0.0f);
  StateDict from_file;
  from_file.tensors["0.weight"] = closed_form_tensor({4, 2}, 0.0f);
  try {
    check_same_structure(from_file, live, "model");
    ADD_FAILURE() << "a shape mismatch must be reported";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 2] in the checkpoint but [4, 3] here"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_same_structure(live, live, "model"));
}

TEST(StateGroup, RefusesKeysHdf5WouldMisread) {
  TempDir dir("sg");
  H5File file = H5File::create(dir.path() / "k.h5");
  H5Group root = file.root();
  for (const char* key : {"", "/abs", "a//b", "a/./b", "a/../b", "trailing/"}) {
    StateGroup g;
    g.tensors[key] = closed_form_tensor({1}, 0.0f);
    EXPECT_THROW(write_state_group(root, g), H5Error) << "key '" << key << "'";
  }
}

}  // namespace
}  // namespace mpitrain::checkpoint
