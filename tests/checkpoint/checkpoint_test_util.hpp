#pragma once
// Helpers shared by the checkpoint tests: temporary folders, closed-form states, and ways
// to damage files.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_state.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/tensor/tensor.hpp"
#include "temp_dir.hpp"

namespace mpitrain::checkpoint::testing {

// The temporary folders of tests/support/temp_dir.hpp, under the names these tests use.
using test_support::SharedTempDir;
using test_support::TempDir;

// Runs `f` on rank 0 only; an exception there is rethrown on every rank (so a failing
// rank-0-only step can never leave the other ranks waiting in the next collective).
void on_rank0(const Communicator& comm, const std::function<void()>& f);

// Returns a tensor whose element i is salt + i / 8 (exact in fp32 for the sizes used).
Tensor closed_form_tensor(const Shape& shape, float salt);

// Returns a full checkpoint state for `rank`: an MLP-like model and AdamW state ("0.weight",
// "0.bias", "2.weight", "2.bias"), scheduler, scaler, engine and data counters, a config
// text, and per-rank RNG state. Every value depends on `step` (and the rank for per_rank).
CheckpointState make_state(int rank, std::int64_t step);

// Returns true when both states hold the same replicated groups, config, per_rank groups,
// step and epoch, value for value; otherwise adds a GoogleTest failure naming the first
// difference.
void expect_same_state(const CheckpointState& actual, const CheckpointState& expected);

// Returns the content of a file.
std::string read_file(const std::filesystem::path& file);
// XORs the byte at `offset` with 0x01.
void flip_byte(const std::filesystem::path& file, std::uint64_t offset);
// Returns the file offset of the first byte of the first chunk of dataset `object` in the
// HDF5 file (via H5Dget_chunk_info), for corrupting tensor data precisely.
std::uint64_t first_chunk_offset(const std::filesystem::path& file, const std::string& object);

// A child process started by spawn_process, with its stdout and stderr on one pipe.
struct ChildProcess {
  int pid = -1;
  int output_fd = -1;  // read end; the caller closes it
};

// Starts argv[0] (an absolute path) with argv, in an environment without the variables of
// an MPI launcher (OMPI_*, PMIX_*, ...), so a child that initialises MPI becomes a singleton
// world of its own instead of joining the parent's job. `extra_env` ("NAME=value") is added,
// replacing variables of the same name.
ChildProcess spawn_process(const std::vector<std::string>& argv,
                           const std::vector<std::string>& extra_env = {});
// Owns a child started by spawn_process: its destructor kills it with SIGKILL (if it has
// not been reaped) and waits for it, and closes its output, so that a test leaving early
// (a failed ASSERT_*, an exception) never leaves the child running.
class OwnedChild {
 public:
  explicit OwnedChild(ChildProcess child) noexcept : child_(child) {}
  ~OwnedChild();
  OwnedChild(const OwnedChild&) = delete;
  OwnedChild& operator=(const OwnedChild&) = delete;
  int pid() const noexcept { return child_.pid; }
  int output_fd() const noexcept { return child_.output_fd; }
  // Returns the raw wait status after sending SIGKILL and waiting for the child; the
  // child is reaped (the destructor then does nothing to it).
  int kill_and_wait();

 private:
  ChildProcess child_;
};

// Returns the next line (without '\n') read from fd, or nothing at end of file.
std::optional<std::string> read_line(int fd);
// Returns the raw wait status of the child after it exits.
int wait_for(int pid);
// Runs argv to completion; returns its exit code (-signal if killed) and its output.
int run_process(const std::vector<std::string>& argv, std::string& output,
                const std::vector<std::string>& extra_env = {});

}  // namespace mpitrain::checkpoint::testing
