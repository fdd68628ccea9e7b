#include "checkpoint_test_util.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <fcntl.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "mpitrain/checkpoint/rank_agreement.hpp"

namespace mpitrain::checkpoint::testing {
namespace fs = std::filesystem;

void on_rank0(const Communicator& comm, const std::function<void()>& f) {
  std::optional<std::string> error;
  if (comm.rank() == 0) error = capture_error(f);
  agree_on_success(comm, error, "test step on rank 0");
}

Tensor closed_form_tensor(const Shape& shape, float salt) {
  Tensor t(shape);
  for (std::size_t i = 0; i < t.numel(); ++i) t[i] = salt + static_cast<float>(i) / 8.0f;
  return t;
}

CheckpointState make_state(int rank, std::int64_t step) {
  const float s = static_cast<float>(step);
  CheckpointState state;
  StateGroup& model = state.replicated["model"];
  model.tensors["0.weight"] = closed_form_tensor({4, 3}, 1.0f + s);
  model.tensors["0.bias"] = closed_form_tensor({4}, 2.0f + s);
  model.tensors["2.weight"] = closed_form_tensor({2, 4}, 3.0f + s);
  model.tensors["2.bias"] = closed_form_tensor({2}, 4.0f + s);
  StateGroup& optimizer = state.replicated["optimizer"];
  for (const auto& [name, tensor] : model.tensors) {
    optimizer.tensors[name + "/exp_avg"] = closed_form_tensor(tensor.shape(), -1.0f - s);
    optimizer.tensors[name + "/exp_avg_sq"] = closed_form_tensor(tensor.shape(), 0.5f + s);
    optimizer.scalars[name + "/step"] = static_cast<double>(step);
  }
  optimizer.scalars["lr"] = 1.0e-3;
  optimizer.scalars["weight_decay"] = 0.01;
  optimizer.scalars["beta1"] = 0.9;
  optimizer.scalars["beta2"] = 0.999;
  optimizer.scalars["eps"] = 1.0e-8;
  state.replicated["scheduler"].scalars["last_lr"] = 1.0e-3 / static_cast<double>(step + 1);
  state.replicated["scheduler"].integers["last_step"] = step;
  StateGroup& scaler = state.replicated["scaler"];
  scaler.scalars["scale"] = 65536.0;
  scaler.integers["growth_tracker"] = step % 7;
  scaler.integers["hysteresis"] = 2;
  scaler.integers["skipped_steps"] = step / 3;
  StateGroup& engine = state.replicated["engine"];
  engine.integers["step"] = step;
  engine.integers["micro_step"] = 4 * step;
  engine.integers["epoch"] = step / 10;
  engine.integers["batches_in_epoch"] = step % 10;
  engine.integers["samples_seen"] = 256 * step;
  StateGroup& data = state.replicated["data"];
  data.integers["seed"] = 1234;
  data.integers["epoch"] = step / 10;
  data.integers["position"] = 64 * (step % 10);
  state.config_yaml = "seed: 1234\nmodel: {kind: mlp, hidden: [4]}\n# step " +
                      std::to_string(step) + "\n";
  StateGroup& rng = state.per_rank["rng"];
  rng.scalars["seed_lo"] = 1234.0;
  rng.scalars["stream_lo"] = static_cast<double>(rank);
  rng.scalars["position_lo"] = static_cast<double>(1000 * step + rank);
  rng.tensors["dropout_mask"] = closed_form_tensor({3}, static_cast<float>(rank) + s);
  state.step = step;
  state.epoch = step / 10;
  return state;
}

namespace {
void expect_same_group(const StateGroup& a, const StateGroup& e, const std::string& where) {
  ASSERT_EQ(a.tensors.size(), e.tensors.size()) << where;
  for (const auto& [key, tensor] : e.tensors) {
    const auto it = a.tensors.find(key);
    ASSERT_NE(it, a.tensors.end()) << where << ": missing tensor " << key;
    ASSERT_EQ(it->second.shape(), tensor.shape()) << where << ": " << key;
    for (std::size_t i = 0; i < tensor.numel(); ++i) {
      ASSERT_EQ(it->second[i], tensor[i]) << where << ": " << key << "[" << i << "]";
    }
  }
  EXPECT_EQ(a.scalars, e.scalars) << where;
  EXPECT_EQ(a.integers, e.integers) << where;
  EXPECT_EQ(a.strings, e.strings) << where;
}
}  // namespace

void expect_same_state(const CheckpointState& actual, const CheckpointState& expected) {
  ASSERT_EQ(actual.replicated.size(), expected.replicated.size());
  for (const auto& [name, group] : expected.replicated) {
    const auto it = actual.replicated.find(name);
    ASSERT_NE(it, actual.replicated.end()) << "missing group " << name;
    expect_same_group(it->second, group, "/" + name);
  }
  ASSERT_EQ(actual.per_rank.size(), expected.per_rank.size());
  for (const auto& [name, group] : expected.per_rank) {
    const auto it = actual.per_rank.find(name);
    ASSERT_NE(it, actual.per_rank.end()) << "missing per-rank group " << name;
    expect_same_group(it->second, group, "rank file /" + name);
  }
  EXPECT_EQ(actual.config_yaml, expected.config_yaml);
  EXPECT_EQ(actual.step, expected.step);
  EXPECT_EQ(actual.epoch, expected.epoch);
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + file.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void flip_byte(const fs::path& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
  if (!f) throw std::runtime_error("cannot open " + file.string());
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  if (!f) throw std::runtime_error("cannot modify " + file.string());
}

std::uint64_t first_chunk_offset(const fs::path& file, const std::string& object) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("H5Fopen " + file.string());
  const hid_t d = H5Dopen2(f, object.c_str(), H5P_DEFAULT);
  if (d < 0) {
    H5Fclose(f);
    throw std::runtime_error("H5Dopen2 " + object);
  }
  const hid_t space = H5Dget_space(d);
  hsize_t chunk_offset[8] = {};
  unsigned filter_mask = 0;
  haddr_t address = HADDR_UNDEF;
  hsize_t size = 0;
  const herr_t rc = H5Dget_chunk_info(d, space, 0, chunk_offset, &filter_mask, &address, &size);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  if (rc < 0 || address == HADDR_UNDEF) throw std::runtime_error("H5Dget_chunk_info " + object);
  return static_cast<std::uint64_t>(address);
}

namespace {
bool is_launcher_variable(std::string_view entry) {
  // What mpiexec and a singleton's MPI_Init export; kept: the user's run-as-root consent.
  if (entry.starts_with("OMPI_ALLOW_RUN_AS_ROOT")) return false;
  for (const std::string_view prefix : {"OMPI_", "PMIX_", "ORTE_", "OPAL_", "PMI_", "HYDRA_"}) {
    if (entry.starts_with(prefix)) return true;
  }
  return false;
}

// Returns the part of "NAME=value" before '='.
std::string_view variable_name(std::string_view entry) { return entry.substr(0, entry.find('=')); }
}  // namespace

ChildProcess spawn_process(const std::vector<std::string>& argv,
                           const std::vector<std::string>& extra_env) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const bool replaced = std::any_of(extra_env.begin(), extra_env.end(), [&](const std::string& x) {
      return variable_name(x) == variable_name(*e);
    });
    if (!is_launcher_variable(*e) && !replaced) env.push_back(*e);
  }
  for (const std::string& x : extra_env) env.push_back(const_cast<char*>(x.c_str()));
  env.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("posix_spawn " + argv[0] + " failed: " + std::strerror(rc));
  }
  return {pid, fds[0]};
}

OwnedChild::~OwnedChild() {
  if (child_.pid > 0) {
    ::kill(child_.pid, SIGKILL);
    int status = 0;
    while (::waitpid(child_.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (child_.output_fd >= 0) ::close(child_.output_fd);
}

int OwnedChild::kill_and_wait() {
  if (child_.pid <= 0) throw std::logic_error("OwnedChild::kill_and_wait: no child to kill");
  if (::kill(child_.pid, SIGKILL) != 0) {
    throw std::runtime_error(std::string("kill(SIGKILL) failed: ") + std::strerror(errno));
  }
  const int status = wait_for(child_.pid);
  child_.pid = -1;
  return status;
}

std::optional<std::string> read_line(int fd) {
  std::string line;
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return line.empty() ? std::nullopt : std::optional<std::string>(line);
    if (c == '\n') return line;
    line += c;
  }
}

int wait_for(int pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  }
  return status;
}

int run_process(const std::vector<std::string>& argv, std::string& output,
                const std::vector<std::string>& extra_env) {
  const ChildProcess child = spawn_process(argv, extra_env);
  output.clear();
  while (const std::optional<std::string> line = read_line(child.output_fd)) output += *line + "\n";
  ::close(child.output_fd);
  const int status = wait_for(child.pid);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? -WTERMSIG(status) : -1000;
}

}  // namespace mpitrain::checkpoint::testing
