#include "temp_dir.hpp"

#include <unistd.h>

#include <random>
#include <sstream>

#include "mpitrain/checkpoint/rank_agreement.hpp"

namespace mpitrain::test_support {
namespace fs = std::filesystem;

namespace {

// Returns a path under the system's temporary folder that no other test uses: the tag, the
// process id and 64 random bits.
fs::path fresh_path(std::string_view tag) {
  std::random_device device;
  std::ostringstream name;
  name << "mpitrain-" << tag << "-" << ::getpid() << "-" << std::hex << device() << device();
  return fs::temp_directory_path() / name.str();
}

}  // namespace

TempDir::TempDir(std::string_view tag) : path_(fresh_path(tag)) { fs::create_directories(path_); }

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

SharedTempDir::SharedTempDir(const Communicator& comm, std::string_view tag) : comm_(comm) {
  std::string chosen;
  if (comm.rank() == 0) {
    const fs::path p = fresh_path(tag);
    fs::create_directories(p);
    chosen = p.string();
  }
  path_ = checkpoint::broadcast_string(comm, chosen, 0);
}

SharedTempDir::~SharedTempDir() {
  try {
    comm_.barrier();
  } catch (...) {
    // Removing the folder matters less than not throwing from a destructor.
  }
  if (comm_.rank() == 0) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

}  // namespace mpitrain::test_support
