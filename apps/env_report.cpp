#include "env_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/checkpoint/state_file.hpp"
#include "mpitrain/nn/blas_threads.hpp"
#include "mpitrain/precision/simd_path.hpp"

namespace mpitrain::app {
namespace {

constexpr std::size_t kHostBytes = 64;  // per rank, NUL-padded

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

void print_env(const MpiRuntime& runtime, const Communicator& comm, std::FILE* out) {
  unsigned char host[kHostBytes] = {};
  ::gethostname(reinterpret_cast<char*>(host), sizeof host - 1);
  std::vector<unsigned char> hosts(kHostBytes * static_cast<std::size_t>(comm.size()));
  comm.allgather(std::span<const unsigned char>(host, kHostBytes), std::span<unsigned char>(hosts));
  if (comm.rank() != 0) return;
  std::set<std::string> nodes;
  for (int r = 0; r < comm.size(); ++r) nodes.insert(std::string(reinterpret_cast<const char*>(hosts.data()) + r * kHostBytes));
  std::string node_list;
  for (const std::string& n : nodes) node_list += (node_list.empty() ? "" : ", ") + n;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  std::fprintf(out,
               "mpitrain     %s\n"
               "MPI          %s (thread level %s)\n"
               "HDF5         %s\n"
               "BLAS         %s\n"
               "compiler     %s %s, C++%ld\n"
               "SIMD path    %s (16-bit conversions and sums)\n"
               "ranks        %d on %d node%s (%s); this node: %d rank%s\n"
               "threads      %u hardware threads on this node; %zu BLAS threads per rank (default: "
               "hardware threads / ranks on the node)\n",
               checkpoint::mpitrain_version().c_str(), first_line(MpiRuntime::library_version()).c_str(),
               to_string(runtime.thread_level()), checkpoint::hdf5_library_version().c_str(),
               nn::blas_library_info().c_str(),
#if defined(__clang__)
               "clang",
#else
               "GCC",
#endif
               __VERSION__, static_cast<long>(__cplusplus / 100 - 2000), std::string(to_string(best_simd_path())).c_str(),
               comm.size(), comm.node_count(), comm.node_count() == 1 ? "" : "s", node_list.c_str(),
               comm.local_size(), comm.local_size() == 1 ? "" : "s", hw,
               nn::default_blas_threads(static_cast<std::size_t>(comm.local_size())));
}

}  // namespace mpitrain::app
