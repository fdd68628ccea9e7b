// CheckpointableSnapshot: an object's state saved into memory (H5File::create_in_memory)
// and loaded back, several snapshots alive at once under one name, nothing written to disk,
// and errors of the object's save()/load() naming it.

#include "mpitrain/checkpoint/checkpointable_snapshot.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/state_group.hpp"

namespace mpitrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::closed_form_tensor;

// A registered-object stand-in: a tensor, a number and a text.
class Holder final : public Checkpointable {
 public:
  void save(H5Group& group) const override {
    if (refuse_save) throw std::runtime_error("Holder cannot save");
    write_state_group(group, state);
  }
  void load(const H5Group& group) override {
    if (refuse_load) throw std::runtime_error("Holder cannot load");
    state = read_state_group(group);
  }
  StateGroup state;
  bool refuse_save = false;
  bool refuse_load = false;
};

Holder holder_of(float salt) {
  Holder h;
  h.state.tensors["w"] = closed_form_tensor({5, 3}, salt);
  h.state.integers["count"] = static_cast<std::int64_t>(salt);
  h.state.strings["note"] = "salt " + std::to_string(static_cast<int>(salt));
  return h;
}

// Adds a failure when the holders' states differ in any key or value.
void expect_same(const Holder& actual, const Holder& expected) {
  CheckpointState a, e;
  a.replicated["holder"] = actual.state;
  e.replicated["holder"] = expected.state;
  testing::expect_same_state(a, e);
}

TEST(CheckpointableSnapshot, RestoresTheStateItWasTakenFrom) {
  Holder a = holder_of(1.0f);
  Holder b = holder_of(2.0f);
  // Two snapshots under one name alive together: HDF5 must keep their files apart.
  const CheckpointableSnapshot snap_a("same", a);
  const CheckpointableSnapshot snap_b("same", b);
  EXPECT_EQ(snap_a.name(), "same");
  a = holder_of(7.0f);
  b = holder_of(8.0f);
  snap_a.restore(a);
  snap_b.restore(b);
  expect_same(a, holder_of(1.0f));
  expect_same(b, holder_of(2.0f));
  // Restoring again gives the same state again.
  a = holder_of(9.0f);
  snap_a.restore(a);
  expect_same(a, holder_of(1.0f));
  // Nothing was written where the name would put a file.
  EXPECT_FALSE(fs::exists("same"));
}

TEST(CheckpointableSnapshot, ErrorsNameTheObject) {
  Holder h = holder_of(1.0f);
  h.refuse_save = true;
  try {
    const CheckpointableSnapshot snap("opt_state", h);
    ADD_FAILURE() << "a refused save() must throw";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("snapshot of registered object 'opt_state'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Holder cannot save"), std::string::npos) << msg;
  }
  h.refuse_save = false;
  const CheckpointableSnapshot snap("opt_state", h);
  h.refuse_load = true;
  try {
    snap.restore(h);
    ADD_FAILURE() << "a refused load() must throw";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("restoring registered object 'opt_state' from its snapshot"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("Holder cannot load"), std::string::npos) << msg;
  }
}

TEST(H5File, InMemoryFileIsNeverWritten) {
  testing::TempDir dir("in_memory");
  const fs::path name = dir.path() / "scratch.h5";
  H5File file = H5File::create_in_memory(name.string());
  H5Group root = file.root();
  root.write_tensor("t", closed_form_tensor({4}, 1.0f));
  const Tensor back = root.read_tensor("t");
  EXPECT_EQ(back[3], 1.0f + 3.0f / 8.0f);
  const FileDigest digest = file.close();
  EXPECT_EQ(digest.bytes, 0u);
  EXPECT_FALSE(fs::exists(name));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

}  // namespace
}  // namespace mpitrain::checkpoint
