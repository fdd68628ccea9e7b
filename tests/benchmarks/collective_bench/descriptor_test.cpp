// The collective descriptors of collective_bench: for every collective, type, algorithm and a
// few element counts (fewer than the ranks, uneven, larger), one run on the descriptor's
// inputs passes its closed-form check on every rank, and a corrupted output fails it; the
// layouts, bus factors, algorithm lists and the table of collectives.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective_table.hpp"
#include "descriptor.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain::bench {
namespace {

const char* const kCollectives[] = {"allreduce", "reduce_scatter", "allgather", "broadcast"};
const DType kTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

class DescriptorTest : public ::testing::Test {
 protected:
  // Returns buffers of `type` laid out by `collective` for `nominal_count` in send_memory_
  // and recv_memory_, inputs filled.
  Buffers buffers(const CollectiveDescriptor& collective, DType type, std::size_t nominal_count) {
    Buffers b;
    b.type = type;
    b.esize = dtype_bytes(type);
    b.layout = collective.layout(nominal_count, comm_.size());
    send_memory_.assign(b.layout.send_count * b.esize, std::byte{0});
    recv_memory_.assign(b.layout.recv_count * b.esize, std::byte{0xff});
    b.send = send_memory_;
    b.recv = recv_memory_;
    collective.fill(b, comm_.rank());
    return b;
  }

  std::vector<std::byte> send_memory_;
  std::vector<std::byte> recv_memory_;

  MpiRuntime runtime_;
  Communicator comm_{runtime_};
};

TEST_F(DescriptorTest, EveryAlgorithmPassesItsCheckAndACorruptedOutputFails) {
  for (const char* op : kCollectives) {
    const auto collective = make_descriptor(op);
    for (const AlgorithmName& algo : collective->algorithms()) {
      // One the Communicator cannot run on this layout (hierarchical on one node) is skipped,
      // as collective_bench --algo all skips it.
      if (!comm_.cannot_run(algo.name, parse_collective(op), DType::f32, ReduceOp::sum).empty()) {
        continue;
      }
      const Runner run = collective->runner(comm_, algo.name);
      for (DType type : kTypes) {
        for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
          SCOPED_TRACE(std::string(op) + " " + algo.name + " " + std::string(to_string(type)) +
                       " " + std::to_string(count));
          Buffers b = buffers(*collective, type, count);
          run(b);
          EXPECT_EQ(collective->count_wrong(b, comm_.rank(), comm_.size()), 0u);
          const std::span<std::byte> out = b.layout.recv_count > 0 ? b.recv : b.send;
          std::memset(out.data(), 0xff, b.esize);  // NaN in the first element
          EXPECT_EQ(collective->count_wrong(b, comm_.rank(), comm_.size()), 1u);
        }
      }
    }
  }
}

TEST_F(DescriptorTest, LayoutsAreWholeBlocksPerRank) {
  const std::size_t n = static_cast<std::size_t>(comm_.size());
  for (const char* op : {"reduce_scatter", "allgather"}) {
    SCOPED_TRACE(op);
    const Layout l = make_descriptor(op)->layout(1000, comm_.size());
    EXPECT_EQ(l.count, std::max(n, 1000 / n * n));
    EXPECT_EQ(std::string(op) == "reduce_scatter" ? l.recv_count : l.send_count, l.count / n);
  }
  EXPECT_EQ(make_descriptor("allreduce")->layout(1000, comm_.size()).count, 1000u);
  EXPECT_EQ(make_descriptor("broadcast")->layout(1000, comm_.size()).recv_count, 0u);
}

TEST(CollectiveTable, BusFactorsAndRedops) {
  EXPECT_DOUBLE_EQ(make_descriptor("allreduce")->bus_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(make_descriptor("reduce_scatter")->bus_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(make_descriptor("allgather")->bus_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(make_descriptor("broadcast")->bus_factor(4), 1.0);
  EXPECT_EQ(make_descriptor("allreduce")->redop(), "sum");
  EXPECT_EQ(make_descriptor("reduce_scatter")->redop(), "sum");
  EXPECT_EQ(make_descriptor("allgather")->redop(), "none");
  EXPECT_EQ(make_descriptor("broadcast")->redop(), "none");
}

TEST(CollectiveTable, EveryCollectiveOffersMpiAndDefault) {
  for (const char* op : kCollectives) {
    SCOPED_TRACE(op);
    std::vector<std::string> names;
    for (const AlgorithmName& a : make_descriptor(op)->algorithms()) names.push_back(a.name);
    EXPECT_NE(std::find(names.begin(), names.end(), "mpi"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "default"), names.end());
  }
}

TEST(CollectiveTable, UnknownNamesAreRefusedWithTheValidOnes) {
  try {
    make_descriptor("alltoall");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce, reduce_scatter, allgather, broadcast"),
              std::string::npos);
  }
  MpiRuntime runtime;
  Communicator comm(runtime);
  EXPECT_THROW(make_descriptor("broadcast")->runner(comm, "ring"), std::invalid_argument);
  EXPECT_THROW(make_descriptor("allreduce")->runner(comm, "tree"), std::invalid_argument);
}

}  // namespace
}  // namespace mpitrain::bench
