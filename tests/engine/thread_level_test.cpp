// The Engine checks the MPI thread level against what it needs (engine/
// thread_level_requirement.hpp): overlap on needs MPI_THREAD_SERIALIZED (the communication
// thread calls MPI), overlap off MPI_THREAD_FUNNELED (every MPI call on the calling thread).
// This binary is a host program with its own main: it initialises MPI itself at the level its
// first argument names ("single" or "funneled"), as a program that links mpitrain into an HPC
// code would, and finalises it itself.
// - Below the level needed, constructing the Engine throws the exact message naming both
//   levels (before, the engine started calling MPI from its communication thread anyway).
// - At MPI_THREAD_FUNNELED, an engine with overlap off trains: buckets are reduced
//   synchronously on the main thread, and the parameters stay identical on every rank.
// Output and outcome as in tests/support/mpi_test_main.cpp: a failure on any rank fails the
// run on every rank.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/engine/thread_level_requirement.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "mpitrain/nn/sgd.hpp"

namespace mpitrain {
namespace {

ThreadLevel g_level = ThreadLevel::single;  // set once by main before any test runs

// Returns what constructing an Engine with `config` on `comm` throws, or "" when it does not.
std::string construction_error(const EngineConfig& config, const Communicator& comm) {
  try {
    const Engine engine(config, comm);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(EngineThreadLevel, RequirementFollowsOverlap) {
  EngineConfig config;
  EXPECT_EQ(required_thread_level(config), ThreadLevel::serialized);
  config.overlap = false;
  EXPECT_EQ(required_thread_level(config), ThreadLevel::funneled);
}

TEST(EngineThreadLevel, OverlapOnIsRefusedNamingBothLevels) {
  const MpiRuntime runtime(nullptr, nullptr, g_level);
  const Communicator comm(runtime);
  ASSERT_EQ(comm.thread_level(), g_level);
  EXPECT_EQ(construction_error({}, comm),
            "Engine (rank " + std::to_string(comm.rank()) +
                "): overlap on (bucket reductions on the communication thread) needs "
                "MPI_THREAD_SERIALIZED, but MPI provides " + to_string(g_level) +
                ": initialise MPI at MPI_THREAD_SERIALIZED or higher (MpiRuntime's default is "
                "MPI_THREAD_MULTIPLE), or turn overlap off (distributed.overlap: false), which "
                "needs MPI_THREAD_FUNNELED");
}

TEST(EngineThreadLevel, OverlapOffNeedsFunneled) {
  const MpiRuntime runtime(nullptr, nullptr, g_level);
  const Communicator comm(runtime);
  EngineConfig config;
  config.overlap = false;
  if (g_level == ThreadLevel::single) {
    EXPECT_EQ(construction_error(config, comm),
              "Engine (rank " + std::to_string(comm.rank()) +
                  "): overlap off (synchronous bucket reduction on the calling thread) needs "
                  "MPI_THREAD_FUNNELED, but MPI provides MPI_THREAD_SINGLE: initialise MPI at "
                  "MPI_THREAD_FUNNELED or higher");
    return;
  }
  config.bucket_cap_mb = 1e-3;  // several buckets
  config.first_bucket_mb = 1e-4;
  data::SyntheticOptions o;
  o.size = 64 * static_cast<std::size_t>(comm.size());
  o.feature_dim = 8;
  o.num_classes = 4;
  o.seed = 3;
  auto ds = std::make_shared<data::SyntheticDataset>(o);
  const std::vector<std::size_t> hidden = {16, 12};
  nn::Sequential model = nn::make_mlp(8, hidden, 4, nn::Activation::relu, 0.0f, 7);
  nn::SgdOptions sgd;
  sgd.lr = 0.1;
  nn::Sgd opt(model.parameters(), sgd);
  data::DataLoaderOptions lo;
  lo.batch_size = 8;
  data::DataLoader loader(ds, lo);
  Engine engine(config, comm);
  engine.prepare(model, opt, loader);
  data::Batch b;
  while (engine.next_batch(b)) {
    engine.backward(nn::cross_entropy(model.forward(b.features), b.labels).grad);
    EXPECT_EQ(engine.last_backward().buckets_launched_early, 0u);  // none on the worker
    ASSERT_TRUE(engine.step());
    engine.zero_grad();
  }
  EXPECT_EQ(engine.step_count(), 8u);
  EXPECT_TRUE(testing::identical_on_all_ranks(comm, testing::flatten(model.parameters())));
}

// Prints the failed assertions of ranks other than 0, which have no default printer.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "unknown", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace mpitrain

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2 || (std::strcmp(argv[1], "single") != 0 && std::strcmp(argv[1], "funneled") != 0)) {
    std::fprintf(stderr, "usage: engine_thread_level_test single|funneled\n");
    return 2;
  }
  const bool single = std::strcmp(argv[1], "single") == 0;
  mpitrain::g_level = single ? mpitrain::ThreadLevel::single : mpitrain::ThreadLevel::funneled;
  const int asked = single ? MPI_THREAD_SINGLE : MPI_THREAD_FUNNELED;
  int provided = -1;
  if (MPI_Init_thread(&argc, &argv, asked, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "host: MPI_Init_thread failed\n");
    return 1;
  }
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (provided != asked) {
    std::fprintf(stderr, "[rank %d] host: asked MPI for level %d, got %d\n", rank, asked, provided);
    MPI_Finalize();
    return 1;
  }
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mpitrain::RankFailurePrinter(rank));
  }
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 1;
  if (MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) {
    any_failed = 1;
  }
  if (any_failed && !failed) std::fprintf(stderr, "[rank %d] host: a test failed on another rank\n", rank);
  MPI_Finalize();
  return any_failed;
}
