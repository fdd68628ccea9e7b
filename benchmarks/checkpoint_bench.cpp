// checkpoint_bench: save and load bandwidth of CheckpointManager next to the raw bandwidth of
// the same folder, measured in the same run.
//
//   mpirun -np 1 checkpoint_bench [--params 50M] [--dir PATH] [--iters 3] [--chunk-mib 4]
//                                 [--json FILE]
//
// Times are rank 0's. At more ranks, rank 0 still writes all of state.h5 (the raw rows are
// rank 0's alone), while every rank reads state.h5 when loading.
//
// The state is a model of --params fp32 parameters (three square layers plus biases, torch
// names) with AdamW's exp_avg and exp_avg_sq: 3 x params floats. Rows (GB/s = payload bytes,
// the 3 x params x 4 bytes, per second; best of --iters):
//   raw write     the same bytes written with 8 MiB write(2) calls, then fsync
//   raw read      state.h5 of the checkpoint just saved, read with 8 MiB read(2) calls
//                 after posix_fadvise(DONTNEED): the device's sequential read bandwidth
//                 for the very bytes a load reads
//   save          CheckpointManager::save (state built from views: no copy of the state)
//   load (cold)   CheckpointManager::load after DONTNEED on every checkpoint file
//   load (warm)   the same with the files in the page cache
//   parts of a cold load, timed separately:
//     verify      verify_checkpoint after DONTNEED (sizes, then XXH3-128 of every byte)
//     allocate    constructing the loaded tensors (uninitialised, huge-page aligned: the
//                 page faults of first touch are part of the HDF5 read)
//     HDF5 read   read_state_file with the files in the page cache (includes allocate)
//   raw read, new memory   the same cold read into one new buffer of the file's size,
//                 allocated as a loaded tensor is: the least any loader returning new
//                 memory does
//   load - allocate   the cold load without the cost of new memory, against raw read
// DONTNEED drops clean pages of a file from this machine's page cache; storage below it (a
// virtual disk's host cache, a RAID controller) may still answer from its own cache, so the
// cold reads measure what this OS sees.

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_manager.hpp"
#include "mpitrain/checkpoint/manifest.hpp"
#include "mpitrain/checkpoint/rank_agreement.hpp"
#include "mpitrain/checkpoint/state_file.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace {

namespace fs = std::filesystem;
using namespace mpitrain;
using namespace mpitrain::checkpoint;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::size_t parse_count(const std::string& text) {
  std::size_t pos = 0;
  const double value = std::stod(text, &pos);
  const std::string suffix = text.substr(pos);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1e3;
  if (suffix == "M" || suffix == "m") scale = 1e6;
  if (suffix == "G" || suffix == "g") scale = 1e9;
  if (!suffix.empty() && scale == 1) throw std::invalid_argument("bad count '" + text + "'");
  return static_cast<std::size_t>(value * scale);
}

// The model, its AdamW state, and the tensors as one list (for the raw rows).
struct BenchState {
  std::vector<Tensor> tensors;
  CheckpointState state;
  std::size_t payload_bytes = 0;
};

BenchState make_bench_state(std::size_t params) {
  // Three square layers of width w and their biases hold about `params` values.
  const auto width = static_cast<std::size_t>(std::sqrt(static_cast<double>(params) / 3.0));
  BenchState b;
  std::mt19937 gen(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const std::vector<std::pair<std::string, Shape>> layers = {
      {"0.weight", {width, width}}, {"0.bias", {width}}, {"2.weight", {width, width}},
      {"2.bias", {width}},          {"4.weight", {width, width}}, {"4.bias", {width}}};
  b.tensors.reserve(layers.size() * 3);
  for (const auto& [name, shape] : layers) {
    for (const char* slot : {"", "/exp_avg", "/exp_avg_sq"}) {
      Tensor t(shape);
      for (float& v : t.span()) v = dist(gen);
      b.payload_bytes += t.numel() * sizeof(float);
      b.tensors.push_back(std::move(t));
      Tensor& stored = b.tensors.back();
      Tensor view = Tensor::view(stored.span(), stored.shape());
      if (*slot == '\0') {
        b.state.replicated["model"].tensors[name] = std::move(view);
      } else {
        b.state.replicated["optimizer"].tensors[name + slot] = std::move(view);
      }
    }
    b.state.replicated["optimizer"].scalars[name + "/step"] = 100.0;
  }
  b.state.replicated["optimizer"].scalars["lr"] = 1e-3;
  b.state.replicated["engine"].integers["step"] = 100;
  b.state.config_yaml = "seed: 0\n";
  b.state.step = 100;
  return b;
}

void drop_cache(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + file.string());
  ::fdatasync(fd);  // clean pages only can be dropped
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void drop_cache_dir(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) drop_cache(e.path());
}

// Returns seconds to write the tensors' bytes to a new file with large writes and fsync.
double raw_write(const fs::path& file, const std::vector<Tensor>& tensors) {
  const auto start = Clock::now();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("open " + file.string());
  constexpr std::size_t kBlock = std::size_t{8} << 20;
  for (const Tensor& t : tensors) {
    const auto* p = reinterpret_cast<const char*>(t.data());
    std::size_t left = t.numel() * sizeof(float);
    while (left > 0) {
      const ssize_t n = ::write(fd, p, std::min(left, kBlock));
      if (n <= 0) throw std::runtime_error("write " + file.string());
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  if (::fsync(fd) != 0) throw std::runtime_error("fsync " + file.string());
  ::close(fd);
  return seconds_since(start);
}

// Returns seconds to read the whole file with 8 MiB reads into one buffer (allocated per
// call, as verify_checkpoint's hash_file does: on the development VM a long-lived buffer
// read consistently slower, 0.45 s against 0.24 s for 600 MB).
double raw_read(const fs::path& file) {
  const auto start = Clock::now();
  std::vector<char> block(std::size_t{8} << 20);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + file.string());
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  for (;;) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0) throw std::runtime_error("read " + file.string());
    if (n == 0) break;
  }
  ::close(fd);
  return seconds_since(start);
}

// Returns seconds to read the whole file into one new, zero-initialised buffer of its size
// (what any loader that returns new memory does at least).
double raw_read_new(const fs::path& file) {
  const auto start = Clock::now();
  // New memory as a loaded tensor gets it (Tensor: huge-page aligned, not zero-filled).
  const std::size_t bytes = fs::file_size(file);
  Tensor buffer = Tensor::uninitialized({(bytes + sizeof(float) - 1) / sizeof(float)});
  char* all = reinterpret_cast<char*>(buffer.data());
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + file.string());
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr std::size_t kBlock = std::size_t{8} << 20;
  for (std::size_t got = 0; got < bytes;) {
    const ssize_t n = ::read(fd, all + got, std::min(kBlock, bytes - got));
    if (n <= 0) throw std::runtime_error("read " + file.string());
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return seconds_since(start);
}

// Returns seconds to construct new tensors of the given shapes (what loading allocates).
double allocate(const std::vector<Tensor>& like) {
  const auto start = Clock::now();
  std::vector<Tensor> fresh;
  fresh.reserve(like.size());
  for (const Tensor& t : like) fresh.push_back(Tensor::uninitialized(t.shape()));
  return seconds_since(start);
}

struct Row {
  std::string name;
  double best_s = 1e300;
  void add(double s) { best_s = std::min(best_s, s); }
};

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime runtime(&argc, &argv);
  const Communicator comm(runtime);
  CLI::App app{"checkpoint_bench: checkpoint save/load bandwidth vs raw file I/O"};
  std::string params_text = "50M";
  std::string dir_text;
  int iters = 3;
  std::string json_file;
  std::size_t chunk_mib = 4;
  app.add_option("--params", params_text, "model parameters (AdamW state triples the bytes)");
  app.add_option("--dir", dir_text, "folder to write in (default: a fresh folder in /tmp)");
  app.add_option("--iters", iters, "repetitions; the best time is reported")->check(CLI::PositiveNumber);
  app.add_option("--chunk-mib", chunk_mib, "HDF5 chunk size in MiB")->check(CLI::PositiveNumber);
  app.add_option("--json", json_file, "also write the table as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    std::string chosen;
    if (comm.rank() == 0) {
      fs::path base = dir_text.empty() ? fs::temp_directory_path() : fs::path(dir_text);
      base /= "checkpoint_bench-" + std::to_string(::getpid());
      fs::create_directories(base);
      chosen = base.string();
    }
    const fs::path dir = broadcast_string(comm, chosen, 0);

    BenchState bench = make_bench_state(parse_count(params_text));
    ProjectConfiguration config;
    config.project_dir = dir / "project";
    config.total_limit = 1;
    config.dataset.chunk_bytes = chunk_mib << 20;
    CheckpointManager manager(config, comm);

    Row raw_w{"raw write + fsync"}, raw_r{"raw read (cold)"}, save{"save"},
        load_cold{"load (cold)"}, load_warm{"load (warm)"}, verify{"  verify (cold)"},
        alloc{"  allocate tensors"}, read{"  HDF5 read (warm)"},
        raw_new{"raw read, new memory"},
        load_no_alloc{"load - allocate"};
    const fs::path raw_file = dir / "raw.bin";
    for (int it = 0; it < iters; ++it) {
      // Raw I/O by rank 0 alone: it is the rank that writes state.h5.
      comm.barrier();
      if (comm.rank() == 0) {
        raw_w.add(raw_write(raw_file, bench.tensors));
        fs::remove(raw_file);
      }

      comm.barrier();
      auto start = Clock::now();
      const SaveResult saved = manager.save(bench.state, comm);
      save.add(seconds_since(start));

      drop_cache_dir(saved.dir);
      comm.barrier();
      start = Clock::now();
      { const LoadedCheckpoint loaded = manager.load(saved.dir, comm); }
      load_cold.add(seconds_since(start));

      comm.barrier();
      start = Clock::now();
      { const LoadedCheckpoint loaded = manager.load(saved.dir, comm); }
      load_warm.add(seconds_since(start));

      // Raw reads of the very file a load reads, state.h5, from the same cold start as the
      // verify pass between them (the best of both is the raw bandwidth).
      drop_cache_dir(saved.dir);
      comm.barrier();
      if (comm.rank() == 0) raw_r.add(raw_read(saved.dir / "state.h5"));
      drop_cache_dir(saved.dir);
      comm.barrier();
      start = Clock::now();
      (void)verify_checkpoint(saved.dir);
      verify.add(seconds_since(start));
      drop_cache_dir(saved.dir);
      comm.barrier();
      if (comm.rank() == 0) raw_r.add(raw_read(saved.dir / "state.h5"));
      drop_cache_dir(saved.dir);
      comm.barrier();
      if (comm.rank() == 0) raw_new.add(raw_read_new(saved.dir / "state.h5"));
      start = Clock::now();
      {
        const H5File file = H5File::open_read_only(saved.dir / "state.h5");
        (void)read_state_file(file);
      }
      read.add(seconds_since(start));
      alloc.add(allocate(bench.tensors));
    }
    load_no_alloc.add(load_cold.best_s - alloc.best_s);

    if (comm.rank() == 0) {
      const double gb = static_cast<double>(bench.payload_bytes) / 1e9;
      std::printf("# checkpoint_bench: %s parameters + AdamW state = %.1f MB payload, world size %d,"
                  " chunks %zu MiB, best of %d, folder %s\n",
                  params_text.c_str(), gb * 1e3, comm.size(), chunk_mib, iters,
                  dir.string().c_str());
      std::printf("%-24s %10s %10s %10s\n", "operation", "time_s", "GB/s", "vs_raw");
      nlohmann::json rows = nlohmann::json::array();
      const auto print = [&](const Row& r, const Row* raw) {
        const double ratio = raw != nullptr ? raw->best_s / r.best_s : 1.0;
        std::printf("%-24s %10.3f %10.2f %9.0f%%\n", r.name.c_str(), r.best_s, gb / r.best_s,
                    100.0 * ratio);
        rows.push_back({{"operation", r.name}, {"time_s", r.best_s}, {"gbps", gb / r.best_s},
                        {"vs_raw", ratio}});
      };
      print(raw_w, nullptr);
      print(save, &raw_w);
      print(raw_r, nullptr);
      print(raw_new, &raw_r);
      print(load_cold, &raw_r);
      print(verify, &raw_r);
      print(alloc, &raw_r);
      print(read, &raw_r);
      print(load_no_alloc, &raw_r);
      print(load_warm, &raw_r);
      if (!json_file.empty()) {
        std::ofstream(json_file) << nlohmann::json{{"payload_bytes", bench.payload_bytes},
                                                   {"world_size", comm.size()},
                                                   {"rows", rows}}
                                        .dump(2)
                                 << "\n";
      }
    }
    comm.barrier();
    if (comm.rank() == 0) fs::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] checkpoint_bench: %s\n", comm.rank(), e.what());
    return 1;
  }
  return 0;
}
