// CheckpointManager at 1 to 3 ranks: round trip, the on-disk layout of DESIGN.md section 5
// (read back with the HDF5 C API), corruption detected before HDF5 parses anything, a failure
// on one rank failing every rank without leftovers, total_limit, numbering, relative project
// folders, explicit folders, clean-up at start, and loading at another world size.

#include "mpitrain/checkpoint/checkpoint_manager.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/state_file.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::expect_same_state;
using testing::make_state;
using testing::SharedTempDir;

// A registered object: a table of values and a counter.
class Counter : public Checkpointable {
 public:
  std::int64_t count = 0;
  Tensor table = Tensor({0});

  void save(H5Group& group) const override {
    group.write_int64_attribute("count", count);
    group.write_tensor("table", table);
  }
  void load(const H5Group& group) override {
    const std::int64_t c = group.read_int64_attribute("count");
    Tensor t = group.read_tensor("table");
    count = c;
    table = std::move(t);
  }
};

class CheckpointManagerTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;  // adopts the MPI the test main initialised
  Communicator comm_{runtime_};

  ProjectConfiguration config(const fs::path& dir) const {
    ProjectConfiguration c;
    c.project_dir = dir / "run";
    return c;
  }
  std::vector<std::int64_t> numbers(const CheckpointManager& m) const {
    std::vector<std::int64_t> out;
    for (const CheckpointInfo& info : m.list()) out.push_back(info.number);
    return out;
  }
  // Returns the entries of `dir` whose name contains ".tmp-".
  static std::vector<std::string> temp_entries(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().find(".tmp-") != std::string::npos) {
        out.push_back(e.path().filename().string());
      }
    }
    return out;
  }
  // Returns the message of the CheckpointError `f` throws (a failure if it does not throw).
  template <class F> static std::string error_of(F&& f) {
    try {
      f();
    } catch (const CheckpointError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected a CheckpointError";
    return {};
  }
};

TEST_F(CheckpointManagerTest, SaveLoadRoundTripWithRegisteredObject) {
  SharedTempDir dir(comm_, "mgr");
  CheckpointManager manager(config(dir.path()), comm_);
  EXPECT_EQ(manager.next_iteration(), 0);
  EXPECT_FALSE(manager.latest().has_value());

  CheckpointState state = make_state(comm_.rank(), 5);
  Counter counter;
  counter.count = 42;
  counter.table = testing::closed_form_tensor({5}, 7.0f);
  state.custom["counter"] = &counter;
  const SaveResult saved = manager.save(state, comm_);
  EXPECT_EQ(saved.number, 0);
  EXPECT_EQ(saved.dir, dir.path() / "run" / "checkpoints" / "checkpoint_0");
  EXPECT_EQ(manager.latest(), saved.dir);
  EXPECT_EQ(manager.next_iteration(), 1);
  EXPECT_EQ(manager.verify(saved.dir).world_size, comm_.size());

  const LoadedCheckpoint loaded = manager.load_latest(comm_);
  CheckpointState expected = make_state(comm_.rank(), 5);
  expect_same_state(loaded.state, expected);
  EXPECT_FALSE(loaded.per_rank_missing);
  EXPECT_EQ(loaded.manifest.world_size, comm_.size());
  EXPECT_EQ(loaded.manifest.step, 5);
  EXPECT_EQ(loaded.custom_names, std::vector<std::string>{"counter"});
  Counter restored;
  loaded.restore("counter", restored);
  EXPECT_EQ(restored.count, 42);
  ASSERT_EQ(restored.table.numel(), 5u);
  EXPECT_EQ(restored.table[4], 7.5f);
  EXPECT_EQ(loaded.custom_state("counter").integers.at("count"), 42);
  const std::string missing = error_of([&] { loaded.restore("optimizer2", restored); });
  EXPECT_NE(missing.find("'optimizer2' (it has: counter)"), std::string::npos) << missing;
}

TEST_F(CheckpointManagerTest, LayoutOnDiskIsTheContract) {
  SharedTempDir dir(comm_, "layout");
  CheckpointManager manager(config(dir.path()), comm_);
  CheckpointState state = make_state(comm_.rank(), 3);
  Counter counter;
  state.custom["counter"] = &counter;
  const fs::path ckpt = manager.save(state, comm_).dir;
  if (comm_.rank() != 0) return;

  // Exactly the files of the contract.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(ckpt)) names.insert(e.path().filename().string());
  std::set<std::string> expected_names = {"state.h5", "MANIFEST.json"};
  for (int r = 0; r < comm_.size(); ++r) expected_names.insert("rank_" + std::to_string(r) + ".h5");
  EXPECT_EQ(names, expected_names);

  // MANIFEST.json: keys, sizes and hashes of every file.
  const nlohmann::json m = nlohmann::json::parse(testing::read_file(ckpt / "MANIFEST.json"));
  EXPECT_EQ(m["format_version"], 1);
  EXPECT_EQ(m["step"], 3);
  EXPECT_EQ(m["epoch"], 0);
  EXPECT_EQ(m["world_size"], comm_.size());
  EXPECT_TRUE(m["created"].is_string());
  EXPECT_EQ(m["files"].size(), expected_names.size() - 1);
  for (const auto& [name, entry] : m["files"].items()) {
    EXPECT_EQ(entry["bytes"].get<std::uintmax_t>(), fs::file_size(ckpt / name)) << name;
    EXPECT_EQ(entry["xxh3_128"], hash_file(ckpt / name).xxh3_128) << name;
  }

  // state.h5 through the plain C API, as a user with h5py would see it.
  const hid_t f = H5Fopen((ckpt / "state.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const auto int_attr = [&](const char* obj, const char* name) {
    std::int64_t v = -1;
    const hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0) << obj << "@" << name;
    EXPECT_GE(H5Aread(a, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(a);
    return v;
  };
  const auto double_attr = [&](const char* obj, const char* name) {
    double v = -1;
    const hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0) << obj << "@" << name;
    EXPECT_GE(H5Aread(a, H5T_NATIVE_DOUBLE, &v), 0);
    H5Aclose(a);
    return v;
  };
  EXPECT_EQ(int_attr("/", "format_version"), 1);
  EXPECT_EQ(int_attr("/", "world_size"), comm_.size());
  EXPECT_GT(H5Aexists_by_name(f, "/", "mpitrain_version", H5P_DEFAULT), 0);
  for (const char* path :
       {"/model/0.weight", "/model/0.bias", "/model/2.weight", "/model/2.bias",
        "/optimizer/0.weight/exp_avg", "/optimizer/0.weight/exp_avg_sq",
        "/optimizer/2.bias/exp_avg", "/scheduler", "/scaler", "/engine", "/data",
        "/custom/counter", "/config"}) {
    EXPECT_GT(H5Lexists(f, path, H5P_DEFAULT), 0) << path;
  }
  EXPECT_EQ(double_attr("/optimizer", "lr"), 1.0e-3);
  EXPECT_EQ(double_attr("/optimizer/0.weight", "step"), 3.0);
  EXPECT_EQ(double_attr("/scaler", "scale"), 65536.0);
  EXPECT_EQ(int_attr("/scaler", "growth_tracker"), 3);
  EXPECT_EQ(int_attr("/scaler", "hysteresis"), 2);
  EXPECT_EQ(int_attr("/scaler", "skipped_steps"), 1);
  EXPECT_EQ(int_attr("/engine", "step"), 3);
  EXPECT_EQ(int_attr("/engine", "micro_step"), 12);
  EXPECT_EQ(int_attr("/engine", "epoch"), 0);
  EXPECT_EQ(int_attr("/engine", "batches_in_epoch"), 3);
  EXPECT_EQ(int_attr("/engine", "samples_seen"), 768);
  EXPECT_EQ(int_attr("/data", "seed"), 1234);
  EXPECT_EQ(int_attr("/data", "position"), 192);

  // /model/0.weight: float32, torch shape [4, 3], values salt + i/8 with salt 1 + step.
  const hid_t d = H5Dopen2(f, "/model/0.weight", H5P_DEFAULT);
  const hid_t type = H5Dget_type(d);
  EXPECT_GT(H5Tequal(type, H5T_IEEE_F32LE), 0);
  const hid_t space = H5Dget_space(d);
  hsize_t dims[2] = {};
  EXPECT_EQ(H5Sget_simple_extent_dims(space, dims, nullptr), 2);
  EXPECT_EQ(dims[0], 4u);
  EXPECT_EQ(dims[1], 3u);
  float values[12] = {};
  EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(values[i], 4.0f + static_cast<float>(i) / 8.0f);
  H5Sclose(space);
  H5Tclose(type);
  H5Dclose(d);

  // /config holds the YAML text.
  const hid_t c = H5Dopen2(f, "/config", H5P_DEFAULT);
  const hid_t ctype = H5Dget_type(c);
  std::string text(H5Tget_size(ctype), '\0');
  EXPECT_GE(H5Dread(c, ctype, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()), 0);
  EXPECT_EQ(text, state.config_yaml);
  H5Tclose(ctype);
  H5Dclose(c);
  H5Fclose(f);

  // rank_<r>.h5 records its rank and holds /rng.
  for (int r = 0; r < comm_.size(); ++r) {
    const fs::path rf = ckpt / ("rank_" + std::to_string(r) + ".h5");
    const hid_t g = H5Fopen(rf.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    std::int64_t stored = -1;
    const hid_t a = H5Aopen_by_name(g, "/", "rank", H5P_DEFAULT, H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_INT64, &stored);
    H5Aclose(a);
    EXPECT_EQ(stored, r);
    EXPECT_GT(H5Lexists(g, "/rng/dropout_mask", H5P_DEFAULT), 0);
    H5Fclose(g);
  }
}

TEST_F(CheckpointManagerTest, CorruptionIsRejectedBeforeHdf5ParsesAnyFile) {
  SharedTempDir dir(comm_, "corrupt");
  CheckpointManager manager(config(dir.path()), comm_);
  manager.save(make_state(comm_.rank(), 1), comm_);
  const fs::path victim = manager.save(make_state(comm_.rank(), 2), comm_).dir;
  const fs::path state_file = victim / "state.h5";
  const fs::path rank_file = victim / rank_file_name(comm_.size() - 1);

  // Damages a file on rank 0, expects every rank's load to fail with our message naming the
  // file (and no HDF5 text: HDF5 never saw the file), then undoes the damage.
  const auto expect_rejected = [&](const fs::path& file, const auto& damage,
                                   const std::string& needle) {
    std::string original;
    testing::on_rank0(comm_, [&] {
      original = testing::read_file(file);
      damage(file, original.size());
    });
    const std::string msg = error_of([&] { (void)manager.load(victim, comm_); });
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("(verifying) failed on rank(s) 0"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("HDF5"), std::string::npos) << msg;
    comm_.barrier();
    testing::on_rank0(comm_, [&] {
      std::ofstream(file, std::ios::binary | std::ios::trunc)
          .write(original.data(), static_cast<std::streamsize>(original.size()));
    });
  };

  // Truncation.
  expect_rejected(
      state_file, [](const fs::path& f, std::size_t size) { fs::resize_file(f, size / 2); },
      "bytes, the manifest records");
  // A flipped bit in tensor data: HDF5's own Fletcher32 would catch it too (shown below), but
  // the manifest hash rejects it first.
  const std::uint64_t data_offset = testing::first_chunk_offset(state_file, "/model/0.weight");
  expect_rejected(
      state_file,
      [&](const fs::path& f, std::size_t) {
        testing::flip_byte(f, data_offset + 2);
        H5File direct = H5File::open_read_only(f);
        try {
          (void)direct.root().read_tensor("model/0.weight");
          ADD_FAILURE() << "HDF5 should reject the flipped bit as well";
        } catch (const H5Error& e) {
          EXPECT_NE(std::string(e.what()).find("Fletcher32"), std::string::npos) << e.what();
        }
      },
      "is corrupted: XXH3-128");
  // A flipped bit in the superblock signature: HDF5 could not even open this file.
  expect_rejected(
      state_file,
      [](const fs::path& f, std::size_t) {
        testing::flip_byte(f, 0);
        EXPECT_THROW((void)H5File::open_read_only(f), H5Error);
      },
      "is corrupted: XXH3-128");
  // A per-rank file.
  expect_rejected(
      rank_file, [](const fs::path& f, std::size_t size) { testing::flip_byte(f, size / 3); },
      "is corrupted: XXH3-128");
  // A malformed manifest.
  expect_rejected(
      victim / "MANIFEST.json",
      [](const fs::path& f, std::size_t) {
        std::ofstream(f, std::ios::trunc) << "{\"format_version\": 1,";
      },
      "not valid JSON");

  // A missing manifest: the folder is not a checkpoint, and latest() skips it.
  std::string manifest_text;
  testing::on_rank0(comm_, [&] {
    manifest_text = testing::read_file(victim / "MANIFEST.json");
    fs::remove(victim / "MANIFEST.json");
  });
  const std::string msg = error_of([&] { (void)manager.load(victim, comm_); });
  EXPECT_NE(msg.find("has no MANIFEST.json: not a committed checkpoint"), std::string::npos) << msg;
  EXPECT_EQ(manager.latest(), victim.parent_path() / "checkpoint_0");
  comm_.barrier();
  testing::on_rank0(comm_, [&] { std::ofstream(victim / "MANIFEST.json") << manifest_text; });

  // Every damage undone: the checkpoint loads again.
  const LoadedCheckpoint loaded = manager.load(victim, comm_);
  expect_same_state(loaded.state, make_state(comm_.rank(), 2));
}

// A write error on one rank only, simulated with RLIMIT_FSIZE: write(2) of a file beyond
// 256 KiB fails with EFBIG ("File too large"), not ENOSPC. What it checks is the protocol's
// answer to any write error on some ranks; a real full disk (ENOSPC) is disk_full_test's.
TEST_F(CheckpointManagerTest, WriteErrorOnOneRankFailsEveryRankAndLeavesNothingBehind) {
  SharedTempDir dir(comm_, "efbig");
  CheckpointManager manager(config(dir.path()), comm_);
  manager.save(make_state(comm_.rank(), 1), comm_);

  // The last rank's writes beyond 256 KiB per file fail with EFBIG (SIGXFSZ ignored).
  const int failing = comm_.size() - 1;
  CheckpointState big = make_state(comm_.rank(), 2);
  rlimit saved_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved_limit), 0);
  void (*saved_handler)(int) = SIG_DFL;
  if (comm_.rank() == failing) {
    big.per_rank["rng"].tensors["big"] = testing::closed_form_tensor({1 << 20}, 0.0f);  // 4 MiB
    saved_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit low = saved_limit;
    low.rlim_cur = 256 * 1024;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &low), 0);
  }
  const std::string msg = error_of([&] { manager.save(big, comm_); });
  if (comm_.rank() == failing) {
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved_limit), 0);
    std::signal(SIGXFSZ, saved_handler);
  }
  EXPECT_NE(msg.find("(writing the files) failed on rank(s) " + std::to_string(failing)),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_NE(msg.find(rank_file_name(failing)), std::string::npos) << msg;

  // Earlier checkpoint intact, nothing half-written, numbering not advanced.
  EXPECT_EQ(numbers(manager), std::vector<std::int64_t>{0});
  EXPECT_TRUE(temp_entries(manager.checkpoints_dir()).empty());
  EXPECT_EQ(manager.next_iteration(), 1);
  expect_same_state(manager.load_latest(comm_).state, make_state(comm_.rank(), 1));
  EXPECT_EQ(manager.save(make_state(comm_.rank(), 3), comm_).number, 1);
}

TEST_F(CheckpointManagerTest, UncreatableFolderFailsEveryRank) {
  // A file where the checkpoints folder should be: creating it fails (as a permission error
  // would, which root cannot be given) on rank 0, and every rank learns it.
  SharedTempDir dir(comm_, "blocked");
  testing::on_rank0(comm_, [&] {
    fs::create_directories(dir.path() / "run");
    std::ofstream(dir.path() / "run" / "checkpoints") << "not a folder";
  });
  CheckpointManager manager(config(dir.path()), comm_);
  const std::string msg = error_of([&] { manager.save(make_state(comm_.rank(), 0), comm_); });
  EXPECT_NE(msg.find("(creating the folder) failed on rank(s) 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checkpoints"), std::string::npos) << msg;
  EXPECT_EQ(manager.next_iteration(), 0);
}

TEST_F(CheckpointManagerTest, TotalLimitKeepsTheNewestByNumber) {
  SharedTempDir dir(comm_, "limit");
  ProjectConfiguration c = config(dir.path());
  c.total_limit = 3;
  CheckpointManager manager(c, comm_);
  SaveResult last;
  for (int step = 0; step < 12; ++step) last = manager.save(make_state(comm_.rank(), step), comm_);
  // checkpoint_10 and _11 sort after checkpoint_9: numeric, not lexicographic.
  EXPECT_EQ(numbers(manager), (std::vector<std::int64_t>{9, 10, 11}));
  EXPECT_EQ(manager.latest(), manager.checkpoints_dir() / "checkpoint_11");
  EXPECT_EQ(last.removed, std::vector<fs::path>{manager.checkpoints_dir() / "checkpoint_8"});
  EXPECT_TRUE(last.warnings.empty());
  EXPECT_FALSE(fs::exists(manager.checkpoints_dir() / "checkpoint_0"));
  expect_same_state(manager.load_latest(comm_).state, make_state(comm_.rank(), 11));
}

TEST_F(CheckpointManagerTest, NumberingContinuesAfterRestartAndLoad) {
  SharedTempDir dir(comm_, "numbering");
  {
    CheckpointManager first(config(dir.path()), comm_);
    for (int step = 0; step < 3; ++step) first.save(make_state(comm_.rank(), step), comm_);
  }
  CheckpointManager second(config(dir.path()), comm_);  // a restarted job
  EXPECT_EQ(second.next_iteration(), 3);
  const LoadedCheckpoint latest = second.load_latest(comm_);
  EXPECT_EQ(latest.dir.filename(), "checkpoint_2");
  EXPECT_EQ(second.next_iteration(), 3);
  EXPECT_TRUE(second.in_the_way().empty());
  EXPECT_EQ(second.save(make_state(comm_.rank(), 3), comm_).number, 3);

  // After loading checkpoint_1 the next save is checkpoint_2, which exists: never overwritten.
  (void)second.load(second.checkpoints_dir() / "checkpoint_1", comm_);
  EXPECT_EQ(second.next_iteration(), 2);
  std::vector<std::int64_t> taken;
  for (const CheckpointInfo& c : second.in_the_way()) taken.push_back(c.number);
  EXPECT_EQ(taken, (std::vector<std::int64_t>{2, 3}));
  const std::string msg = error_of([&] { second.save(make_state(comm_.rank(), 9), comm_); });
  EXPECT_NE(msg.find("checkpoint_2' already exists"), std::string::npos) << msg;
  EXPECT_EQ(numbers(second), (std::vector<std::int64_t>{0, 1, 2, 3}));
  expect_same_state(second.load(second.checkpoints_dir() / "checkpoint_2", comm_).state,
                    make_state(comm_.rank(), 2));
  EXPECT_TRUE(temp_entries(second.checkpoints_dir()).empty());

  ProjectConfiguration c = config(dir.path());
  c.iteration = 7;
  CheckpointManager third(c, comm_);
  EXPECT_EQ(third.save(make_state(comm_.rank(), 7), comm_).number, 7);
  EXPECT_EQ(third.next_iteration(), 8);
}

TEST_F(CheckpointManagerTest, RelativeProjectDirIsResolvedOnceAtConstruction) {
  SharedTempDir dir(comm_, "relative");
  const fs::path original = fs::current_path();
  fs::current_path(dir.path());
  ProjectConfiguration c;
  c.project_dir = "runs/rel";
  std::optional<CheckpointManager> manager;
  manager.emplace(c, comm_);
  fs::current_path(original);  // a later chdir must not move the checkpoints
  EXPECT_EQ(manager->config().project_dir, dir.path() / "runs" / "rel");
  const SaveResult saved = manager->save(make_state(comm_.rank(), 0), comm_);
  EXPECT_EQ(saved.dir, dir.path() / "runs" / "rel" / "checkpoints" / "checkpoint_0");
  EXPECT_TRUE(fs::exists(saved.dir / "MANIFEST.json"));
}

TEST_F(CheckpointManagerTest, ExplicitFolderSaveIsCommittedAndNeverOverwritten) {
  SharedTempDir dir(comm_, "explicit");
  CheckpointManager manager(config(dir.path()), comm_);
  const fs::path target = dir.path() / "exports" / "final";
  const SaveResult saved = manager.save(make_state(comm_.rank(), 4), comm_, target);
  EXPECT_EQ(saved.dir, target);
  EXPECT_EQ(saved.number, -1);
  EXPECT_EQ(manager.next_iteration(), 0);
  expect_same_state(manager.load(target, comm_).state, make_state(comm_.rank(), 4));
  const std::string msg = error_of([&] { manager.save(make_state(comm_.rank(), 5), comm_, target); });
  EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;
  EXPECT_TRUE(temp_entries(target.parent_path()).empty());
  expect_same_state(manager.load(target, comm_).state, make_state(comm_.rank(), 4));
  EXPECT_THROW((void)manager.load(dir.path() / "nowhere", comm_), CheckpointError);
}

TEST_F(CheckpointManagerTest, AbandonedFoldersAreRemovedAtStart) {
  SharedTempDir dir(comm_, "cleanup");
  fs::path ckpts;
  {
    CheckpointManager first(config(dir.path()), comm_);
    first.save(make_state(comm_.rank(), 0), comm_);
    ckpts = first.checkpoints_dir();
  }
  // A committed save to an explicit folder of checkpoints/ (the trainer's step_<S>).
  {
    CheckpointManager explicit_saver(config(dir.path()), comm_);
    explicit_saver.save(make_state(comm_.rank(), 3), comm_, ckpts / "step_3");
  }
  // Not made by a save (the id is not 16 lowercase hex digits), or not a save at all.
  const std::vector<std::string> foreign = {"notes", "step_4.tmp-notanid", "old.tmp-0123abcd",
                                            "step_4.tmp-0123456789ABCDEF", ".tmp-0123456789abcdef",
                                            "step_4.tmp-0123456789abcdef0", "step_7"};
  testing::on_rank0(comm_, [&] {
    fs::create_directories(ckpts / "checkpoint_5.tmp-00000000deadbeef");
    std::ofstream(ckpts / "checkpoint_5.tmp-00000000deadbeef" / "state.h5") << "partial";
    fs::create_directories(ckpts / "checkpoint_6");  // crashed during rename: no manifest
    std::ofstream(ckpts / "checkpoint_6" / "state.h5") << "whatever";
    // An interrupted save to the explicit folder step_4.
    fs::create_directories(ckpts / temp_folder_name("step_4", 0x0123456789abcdefULL));
    std::ofstream(ckpts / "step_4.tmp-0123456789abcdef" / "rank_0.h5") << "partial";
    for (const std::string& name : foreign) fs::create_directories(ckpts / name);
  });
  CheckpointManager second(config(dir.path()), comm_);
  if (comm_.rank() == 0) {
    EXPECT_EQ(second.removed_at_start(),
              (std::vector<fs::path>{ckpts / "checkpoint_5.tmp-00000000deadbeef",
                                     ckpts / "checkpoint_6", ckpts / "step_4.tmp-0123456789abcdef"}));
  }
  EXPECT_FALSE(fs::exists(ckpts / "checkpoint_5.tmp-00000000deadbeef"));
  EXPECT_FALSE(fs::exists(ckpts / "checkpoint_6"));
  EXPECT_FALSE(fs::exists(ckpts / "step_4.tmp-0123456789abcdef"));
  for (const std::string& name : foreign) EXPECT_TRUE(fs::exists(ckpts / name)) << name;
  expect_same_state(second.load(ckpts / "step_3", comm_).state, make_state(comm_.rank(), 3));
  EXPECT_EQ(numbers(second), std::vector<std::int64_t>{0});
  EXPECT_EQ(second.next_iteration(), 1);
  const std::string msg = error_of([&] { (void)second.load(ckpts / "checkpoint_5.tmp-1", comm_); });
  EXPECT_NE(msg.find("temporary folder"), std::string::npos) << msg;
}

// Writes checkpoints/checkpoint_<number> as a job of `world` ranks would have (rank 0 only).
void fabricate(const fs::path& ckpts, std::int64_t number, int world) {
  const fs::path dir = ckpts / checkpoint_folder_name(number);
  fs::create_directories(dir);
  write_state_file(dir / kStateFile, make_state(0, number), world);
  Manifest m;
  m.format_version = kFormatVersion;
  m.step = number;
  m.world_size = world;
  m.created = utc_timestamp_now();
  m.files[std::string(kStateFile)] = hash_file(dir / kStateFile);
  for (int r = 0; r < world; ++r) {
    write_rank_file(dir / rank_file_name(r), make_state(r, number).per_rank, r, world);
    m.files[rank_file_name(r)] = hash_file(dir / rank_file_name(r));
  }
  write_manifest(dir, m);
}

TEST_F(CheckpointManagerTest, LoadsCheckpointsOfOtherWorldSizes) {
  SharedTempDir dir(comm_, "nm");
  const fs::path ckpts = dir.path() / "run" / "checkpoints";
  testing::on_rank0(comm_, [&] {
    fabricate(ckpts, 0, 1);                 // saved by 1 rank
    fabricate(ckpts, 1, comm_.size() + 2);  // saved by more ranks than we have
  });
  CheckpointManager manager(config(dir.path()), comm_);

  const LoadedCheckpoint from_one = manager.load(ckpts / "checkpoint_0", comm_);
  expect_same_state(CheckpointState{from_one.state.replicated, {}, from_one.state.config_yaml,
                                    {}, from_one.state.step, from_one.state.epoch},
                    CheckpointState{make_state(0, 0).replicated, {}, make_state(0, 0).config_yaml,
                                    {}, 0, 0});
  EXPECT_EQ(from_one.per_rank_missing, comm_.rank() >= 1);
  if (comm_.rank() == 0) {
    EXPECT_EQ(from_one.state.per_rank.at("rng").scalars, make_state(0, 0).per_rank.at("rng").scalars);
  } else {
    EXPECT_TRUE(from_one.state.per_rank.empty());
  }

  const LoadedCheckpoint from_more = manager.load(ckpts / "checkpoint_1", comm_);
  EXPECT_FALSE(from_more.per_rank_missing);
  expect_same_state(from_more.state, make_state(comm_.rank(), 1));
}

}  // namespace
}  // namespace mpitrain::checkpoint
