// Communicator: every collective and type against closed-form results (counts 0, 1, below the
// world size, odd, large), in place and out of place, blocking and nonblocking (completed in
// any order); results bitwise identical on every rank, also for non-integer f32/f64 inputs
// whose sums round (checked against a double-precision reference); splitting into pieces (with a lowered
// per-call limit); topology; communicators handed in by the host (a world split in halves);
// error paths; the collectives_issued counter.

#include "mpitrain/collectives/communicator.hpp"

#include <gtest/gtest.h>
#include <mpi.h>  // the host's side of the tests of communicators handed in by a host

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective_values.hpp"
#include "temp_dir.hpp"
#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

using test::Buffer;
using test::describe;
using test::expected;
using test::inputs;
using test::kAllOps;
using test::kAllTypes;
using test::mismatches;
using test::value;

// Returns rank `rank`'s non-integer input at index i: a pseudo-random value in [-1, 1) (the
// splitmix64 hash of rank and index) with `bits` significant bits, so that it is exact in a
// type of that precision (24: f32, 53: f64).
double noise(int rank, std::size_t i, int bits) {
  std::uint64_t z = (static_cast<std::uint64_t>(rank) << 48) ^ static_cast<std::uint64_t>(i);
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return std::ldexp(static_cast<double>(z >> (64 - bits)), 1 - bits) - 1.0;
}

class CommunicatorTest : public ::testing::Test {
 protected:
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  std::size_t n() const { return static_cast<std::size_t>(comm_.size()); }
  // Counts 0, 1, below the world size, small odd, and odd above a thousand.
  std::vector<std::size_t> small_counts() const {
    return {0, 1, std::max<std::size_t>(n() - 1, 2), 5, 1001};
  }
  // small_counts() and a large odd count (1 MiB of f32 and more: MPI's large-message
  // protocols).
  std::vector<std::size_t> counts_with_large() const {
    std::vector<std::size_t> counts = small_counts();
    counts.push_back((std::size_t{1} << 18) + 3);
    return counts;
  }
  // Returns the allgather result: block r holds rank r's inputs at [0, count).
  Buffer gathered(DType t, std::size_t count) const {
    Buffer expect(count * n(), t);
    for (int r = 0; r < size(); ++r) {
      for (std::size_t i = 0; i < count; ++i) {
        expect.set(static_cast<std::size_t>(r) * count + i, value(t, r, i));
      }
    }
    return expect;
  }
  // Rank r's allgatherv count when every count is scaled by `scale`: scale * ((3 r + 1) mod 5),
  // i.e. scale * (1, 4, 2, 0), so one rank sends nothing at 4 ranks.
  std::vector<std::size_t> uneven_counts(std::size_t scale) const {
    std::vector<std::size_t> counts(n());
    for (std::size_t r = 0; r < n(); ++r) counts[r] = scale * ((3 * r + 1) % 5);
    return counts;
  }
  // Returns the allgatherv result for `counts`: rank r's inputs at [0, counts[r]), packed.
  Buffer gathered_v(DType t, const std::vector<std::size_t>& counts) const {
    Buffer expect(std::accumulate(counts.begin(), counts.end(), std::size_t{0}), t);
    std::size_t at = 0;
    for (int r = 0; r < size(); ++r) {
      for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
        expect.set(at++, value(t, r, i));
      }
    }
    return expect;
  }
  bool identical(const Buffer& b) const {
    return test::identical_on_all_ranks(comm_, b.data(), b.bytes.size());
  }

  MpiRuntime runtime_;  // adopts the MPI of the test main
  Communicator comm_{runtime_};
};

// ---- topology and names ---------------------------------------------------------------------

TEST_F(CommunicatorTest, RankSizeAndNodes) {
  EXPECT_EQ(rank(), runtime_.world_rank());
  EXPECT_EQ(size(), runtime_.world_size());
  EXPECT_GE(comm_.local_size(), 1);
  EXPECT_LE(comm_.local_size(), size());
  EXPECT_GE(comm_.local_rank(), 0);
  EXPECT_LT(comm_.local_rank(), comm_.local_size());
  EXPECT_GE(comm_.node_count(), 1);
  EXPECT_LT(comm_.node_index(), comm_.node_count());
  // The node sizes add up to the world; the nodes are numbered 0..node_count-1.
  const int leader_size = comm_.local_rank() == 0 ? comm_.local_size() : 0;
  EXPECT_EQ(comm_.allreduce_value(leader_size, ReduceOp::sum), size());
  EXPECT_EQ(comm_.allreduce_value(comm_.node_index(), ReduceOp::max), comm_.node_count() - 1);
  const std::vector<int> nodes = comm_.allgather_value(comm_.node_index());
  EXPECT_TRUE(std::is_sorted(nodes.begin(), nodes.end()) || comm_.node_count() > 1);
}

TEST_F(CommunicatorTest, SharedBuffersGoBackOnceReleased) {
  // Allocating again after releasing (an engine prepared again, a sweep in one job) keeps one
  // buffer mapped, not one per allocation: 10 rounds of 1 MiB map 1 MiB at the end. On one
  // node the shm allreduce reads each new buffer in place: every rank's (rank + 1) * k summed.
  constexpr std::size_t kBytes = std::size_t{1} << 20;
  const std::size_t before = comm_.shared_bytes_mapped();
  SharedBuffer buffer;
  for (int k = 1; k <= 10; ++k) {
    buffer.reset();
    buffer = comm_.allocate_shared(kBytes);
    ASSERT_EQ(buffer.bytes().size(), kBytes);
    EXPECT_EQ(comm_.shared_bytes_mapped(), before + kBytes);
    const std::span<float> values(reinterpret_cast<float*>(buffer.bytes().data()),
                                  kBytes / sizeof(float));
    // Zero-filled, also where an earlier buffer lay.
    EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }));
    std::fill(values.begin(), values.end(), static_cast<float>((rank() + 1) * k));
    comm_.allreduce<float>(values, ReduceOp::sum, comm_.node_count() == 1 ? "shm" : "default");
    const float expect = static_cast<float>(k * size() * (size() + 1) / 2);
    EXPECT_EQ(std::count(values.begin(), values.end(), expect),
              static_cast<std::ptrdiff_t>(values.size()));
  }
  buffer.reset();
  EXPECT_TRUE(comm_.allocate_shared(0).bytes().empty());
  EXPECT_EQ(comm_.shared_bytes_mapped(), before);
}

TEST_F(CommunicatorTest, AlgorithmNames) {
  const std::vector<std::string_view> names = algorithm_names(Collective::allreduce);
  for (std::string_view a : names) EXPECT_NO_THROW(require_algorithm(Collective::allreduce, a));
  EXPECT_EQ(names, (std::vector<std::string_view>{"default", "mpi", "ring", "reduce_bcast", "shm",
                                                  "hierarchical"}));
  EXPECT_EQ(kDefaultAlgorithm, "default");
  try {
    require_algorithm(Collective::allreduce, "tree");
    FAIL() << "accepted 'tree'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ring"), std::string::npos) << e.what();
  }
}

// Across nodes (CTest multinode.collectives_test), the built-in table without its one-node
// bands: MPI for the native types at every size; for 16-bit types the ring from 16 KiB (2 KiB
// for averages) times size() - 1 bytes as sent, MPI below, and MPI for bf16 sums, maxima and
// minima of [2 MiB, 8 MiB) at 2 ranks; hierarchical where it applies (several ranks per node,
// or 2 nodes of one rank from 2 MiB, every type).
void expect_rules_across_nodes(const Communicator& comm) {
  constexpr std::size_t KiB = 1024;
  constexpr std::size_t MiB = KiB * KiB;
  const auto peers = static_cast<std::size_t>(comm.size() - 1);
  // hierarchical in [8 KiB, 64 KiB) and from 256 KiB when several ranks share each node (as
  // at 2 x 2), else MPI.
  const bool several = comm.local_size() > 1;
  const bool pair = comm.local_size() == 1 && comm.node_count() == 2;
  const auto hierarchical = [&](std::size_t bytes) {
    return (several && bytes >= 8 * KiB && (bytes < 64 * KiB || bytes >= 256 * KiB)) ||
           (pair && bytes >= 2 * MiB);
  };
  for (ReduceOp op : kAllOps) {
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
      for (std::size_t bytes : {std::size_t{8}, 8 * KiB - 8, 8 * KiB, 64 * KiB, 256 * KiB - 8,
                                256 * KiB, 256 * MiB}) {
        EXPECT_EQ(comm.default_allreduce_algorithm(bytes / dtype_bytes(t), t, op),
                  hierarchical(bytes) ? "hierarchical" : "mpi")
            << bytes << " B " << to_string(t) << " " << to_string(op);
      }
    }
    const std::size_t ring_from = (op == ReduceOp::avg ? 2 : 16) * KiB * peers;
    for (DType t : {DType::bf16, DType::f16}) {
      for (std::size_t bytes : {std::size_t{2}, 8 * KiB, ring_from - 2, ring_from, 4 * MiB, 32 * MiB}) {
        const bool band = t == DType::bf16 && op != ReduceOp::avg && comm.size() == 2 &&
                          bytes >= 2 * MiB && bytes < 8 * MiB;
        const char* expected = bytes >= ring_from && !band ? "ring" : "mpi";
        if (several && t == DType::bf16 && bytes >= 256 * KiB) expected = "hierarchical";
        if (pair && bytes >= 2 * MiB) expected = "hierarchical";
        EXPECT_EQ(comm.default_allreduce_algorithm(bytes / 2, t, op), expected)
            << bytes << " B " << to_string(t) << " " << to_string(op);
      }
    }
  }
}

TEST_F(CommunicatorTest, DefaultAlgorithmRule) {
  // The built-in table (collectives/algorithm_selection.cpp). One rank: MPI for everything.
  // Ranks of one node: shared memory for every type and size; the rules for ranks across
  // nodes are also checked in algorithm_selection_test.cpp.
  if (comm_.node_count() > 1) return expect_rules_across_nodes(comm_);
  const auto expect = [&](std::size_t bytes, DType t, ReduceOp op, std::string_view algo) {
    EXPECT_EQ(comm_.default_allreduce_algorithm(bytes / dtype_bytes(t), t, op),
              size() == 1 ? std::string_view("mpi") : algo)
        << bytes << " B " << to_string(t) << " " << to_string(op);
  };
  constexpr std::size_t KiB = 1024;
  constexpr std::size_t MiB = KiB * KiB;
  for (ReduceOp op : kAllOps) {
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
      for (std::size_t bytes : {std::size_t{8}, 64 * KiB - 8, 64 * KiB, 4 * MiB, 256 * MiB}) {
        expect(bytes, t, op, "shm");
      }
    }
    for (DType t : {DType::bf16, DType::f16}) {
      for (std::size_t bytes : {std::size_t{2}, 8 * KiB, 16 * KiB, 4 * MiB, 32 * MiB}) {
        expect(bytes, t, op, "shm");
      }
    }
  }
}

// ---- blocking collectives ------------------------------------------------------------------

TEST_F(CommunicatorTest, ShmDeclinesAcrossNodes) {
  // shm works through the node's shared segment. Asked for by name when the ranks span nodes,
  // every collective it implements refuses before anything is issued, on every rank, saying
  // why; `default` passes it over (DefaultAlgorithmRule). On one node it runs.
  const std::size_t count = 8;
  Buffer send = inputs(DType::f32, rank(), count * n());
  Buffer out(count * n(), DType::f32);
  const std::vector<std::function<void()>> calls = {
      [&] { comm_.allreduce(send.data(), out.data(), count, DType::f32, ReduceOp::sum, "shm"); },
      [&] { comm_.reduce_scatter(send.data(), out.data(), count, DType::f32, ReduceOp::sum, "shm"); },
      [&] { comm_.allgather(send.data(), out.data(), count, DType::f32, "shm"); },
      [&] { comm_.broadcast(out.data(), count, DType::f32, 0, "shm"); },
  };
  for (std::size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    if (comm_.node_count() == 1) {
      EXPECT_NO_THROW(calls[i]());
      continue;
    }
    try {
      calls[i]();
      ADD_FAILURE() << "shm ran across " << comm_.node_count() << " nodes";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("algorithm 'shm' cannot run it: the ranks span " +
                                           std::to_string(comm_.node_count()) + " nodes"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(comm_.allreduce_value(1, ReduceOp::sum), size());  // nothing is pending
}

TEST_F(CommunicatorTest, AllreduceEveryTypeOpAndAlgorithm) {
  for (std::string_view algo : test::runnable_algorithms(comm_, Collective::allreduce)) {
    for (DType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (std::size_t count : small_counts()) {
          SCOPED_TRACE(describe(t, op, count) + " " + std::string(algo));
          const Buffer send = inputs(t, rank(), count);
          Buffer out(count, t);
          out.poison();
          comm_.allreduce(send.data(), out.data(), count, t, op, algo);
          EXPECT_EQ(mismatches(out, op, size()), 0u);
          EXPECT_TRUE(identical(out));
          Buffer inplace = inputs(t, rank(), count);
          comm_.allreduce(inplace.data(), inplace.data(), count, t, op, algo);
          EXPECT_EQ(mismatches(inplace, op, size()), 0u);
          EXPECT_EQ(inplace.bytes, out.bytes);
        }
      }
    }
  }
}

TEST_F(CommunicatorTest, AllreduceOfRoundingSumsIsIdenticalOnEveryRankAndClose) {
  // The closed-form inputs above are small integers, whose sums are exact in any order. Here
  // every element's sum rounds, so a rank that added in another order would hold other bits.
  // Counts: 1, below the world size, odd, above one ring segment (256 KiB: 65536 f32), and
  // with chunks of more than one segment at 4 ranks (300001 / 4 > 65536).
  const std::vector<std::size_t> counts = {1, std::max<std::size_t>(n() - 1, 2), 1001, 65537,
                                           300001};
  for (DType t : {DType::f32, DType::f64}) {
    const int bits = t == DType::f32 ? 24 : 53;
    // Unit roundoff of the type: a sum of n values in any order is within
    // (n - 1) u sum|x| of the exact sum; the average adds one rounding of the division.
    const double u = std::ldexp(1.0, -bits);
    for (std::size_t count : counts) {
      // The reference: every rank's inputs, summed in long double, and sum |x| per element.
      std::vector<long double> exact(count, 0.0L);
      std::vector<double> magnitude(count, 0.0);
      for (int r = 0; r < size(); ++r) {
        for (std::size_t i = 0; i < count; ++i) {
          const double x = noise(r, i, bits);
          exact[i] += x;
          magnitude[i] += std::abs(x);
        }
      }
      Buffer send(count, t);
      for (std::size_t i = 0; i < count; ++i) send.set(i, noise(rank(), i, bits));
      for (std::string_view algo : test::runnable_algorithms(comm_, Collective::allreduce)) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          SCOPED_TRACE(describe(t, op, count) + " " + std::string(algo));
          Buffer out(count, t);
          out.poison();
          comm_.allreduce(send.data(), out.data(), count, t, op, algo);
          EXPECT_TRUE(identical(out));
          const double divisor = op == ReduceOp::avg ? static_cast<double>(size()) : 1.0;
          // Elements farther from the reference than the bound (NaN included), and the first.
          std::size_t far = 0;
          std::string first;
          for (std::size_t i = 0; i < count; ++i) {
            const double reference = static_cast<double>(exact[i]) / divisor;
            const double tolerance =
                (static_cast<double>(size()) + 2.0) * u * magnitude[i] / divisor +
                std::numeric_limits<double>::denorm_min();
            if (std::abs(out[i] - reference) <= tolerance) continue;
            if (far++ == 0) {
              first = "index " + std::to_string(i) + ": got " + std::to_string(out[i]) +
                      ", reference " + std::to_string(reference);
            }
          }
          EXPECT_EQ(far, 0u) << "first at " << first;
        }
      }
    }
  }
}

TEST_F(CommunicatorTest, AllreduceLargeCount) {
  const std::size_t count = (std::size_t{1} << 20) + 3;
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      SCOPED_TRACE(describe(t, op, count));
      const Buffer send = inputs(t, rank(), count);
      Buffer out(count, t);
      out.poison();
      comm_.allreduce(send.data(), out.data(), count, t, op, "mpi");
      EXPECT_EQ(mismatches(out, op, size()), 0u);
      EXPECT_TRUE(identical(out));
      Buffer inplace = inputs(t, rank(), count);
      comm_.allreduce(inplace.data(), inplace.data(), count, t, op);  // default algorithm
      EXPECT_EQ(inplace.bytes, out.bytes);
      EXPECT_TRUE(identical(inplace));
    }
  }
}

TEST_F(CommunicatorTest, BroadcastFromEveryRoot) {
  for (DType t : kAllTypes) {
    for (std::size_t count : small_counts()) {
      for (int root = 0; root < size(); ++root) {
        SCOPED_TRACE(describe(t, ReduceOp::sum, count) + " root " + std::to_string(root));
        Buffer b(count, t);
        if (rank() == root) {
          b = inputs(t, root, count);
        } else {
          b.poison();
        }
        comm_.broadcast(b.data(), count, t, root);
        EXPECT_EQ(b.bytes, inputs(t, root, count).bytes);
      }
    }
  }
  const std::size_t large = (std::size_t{1} << 20) + 3;
  Buffer b = rank() == size() - 1 ? inputs(DType::f64, size() - 1, large) : Buffer(large, DType::f64);
  comm_.broadcast(b.data(), large, DType::f64, size() - 1);
  EXPECT_EQ(b.bytes, inputs(DType::f64, size() - 1, large).bytes);
}

TEST_F(CommunicatorTest, ReduceScatterEveryTypeAndOp) {
  std::vector<std::size_t> counts = small_counts();
  counts.push_back((std::size_t{1} << 18) + 3);
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t block : counts) {
        SCOPED_TRACE(describe(t, op, block));
        const Buffer send = inputs(t, rank(), block * n());
        Buffer out(block, t);
        out.poison();
        comm_.reduce_scatter(send.data(), out.data(), block, t, op);
        EXPECT_EQ(mismatches(out, op, size(), static_cast<std::size_t>(rank()) * block), 0u);
      }
    }
  }
}

TEST_F(CommunicatorTest, AllgatherInPlaceAndOutOfPlace) {
  for (DType t : kAllTypes) {
    for (std::size_t count : counts_with_large()) {
      SCOPED_TRACE(describe(t, ReduceOp::sum, count));
      const Buffer expect = gathered(t, count);
      const Buffer send = inputs(t, rank(), count);
      Buffer out(count * n(), t);
      out.poison();
      comm_.allgather(send.data(), out.data(), count, t);
      EXPECT_EQ(out.bytes, expect.bytes);
      // In place: our block already sits at block rank() of the output.
      Buffer inplace(count * n(), t);
      inplace.poison();
      std::copy(send.bytes.begin(), send.bytes.end(),
                inplace.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank()) *
                                                                    send.bytes.size()));
      comm_.allgather(static_cast<std::byte*>(inplace.data()) + rank() * send.bytes.size(),
                      inplace.data(), count, t);
      EXPECT_EQ(inplace.bytes, expect.bytes);
    }
  }
}

TEST_F(CommunicatorTest, AllgathervUnevenCountsIncludingZero) {
  // Rank r sends scale * ((3 r + 1) mod 5) elements: scale * (1, 4, 2, 0, ...); the large
  // scale gives each rank up to a million elements.
  for (std::size_t scale : {std::size_t{1}, (std::size_t{1} << 18) + 3}) {
    const std::vector<std::size_t> counts = uneven_counts(scale);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    for (DType t : kAllTypes) {
      SCOPED_TRACE(std::string(to_string(t)) + " scale " + std::to_string(scale));
      const Buffer expect = gathered_v(t, counts);
      const std::size_t mine = counts[static_cast<std::size_t>(rank())];
      const Buffer send = inputs(t, rank(), mine);
      Buffer out(total, t);
      out.poison();
      comm_.allgatherv(send.data(), mine, out.data(), counts, t);
      EXPECT_EQ(out.bytes, expect.bytes);
    }
  }
  const std::vector<std::size_t> counts = uneven_counts(1);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  // Every count zero: nothing to do, nothing touched.
  std::vector<std::size_t> zeros(n(), 0);
  comm_.allgatherv<float>(std::span<const float>(), std::span<float>(), zeros);
  // Typed front end.
  std::vector<std::int32_t> mine(counts[static_cast<std::size_t>(rank())], rank());
  std::vector<std::int32_t> all(total, -1);
  comm_.allgatherv<std::int32_t>(mine, all, counts);
  std::size_t at = 0;
  for (int r = 0; r < size(); ++r) {
    for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) EXPECT_EQ(all[at++], r);
  }
}

TEST_F(CommunicatorTest, AllgatherStringsReturnsEveryRanksTextInRankOrder) {
  // Rank r sends r copies of the letter 'a' + r, then "|r" (rank 0: "|0"); in a second call
  // the odd ranks send an empty text, so zero lengths sit next to non-zero ones.
  auto text_of = [](int r) {
    return std::string(static_cast<std::size_t>(r), static_cast<char>('a' + r)) + "|" +
           std::to_string(r);
  };
  const std::vector<std::string> all = comm_.allgather_strings(text_of(rank()));
  ASSERT_EQ(all.size(), n());
  for (std::size_t r = 0; r < n(); ++r) EXPECT_EQ(all[r], text_of(static_cast<int>(r)));
  const std::string mine = rank() % 2 == 1 ? std::string() : text_of(rank());
  const std::vector<std::string> some = comm_.allgather_strings(mine);
  ASSERT_EQ(some.size(), n());
  for (std::size_t r = 0; r < n(); ++r) {
    EXPECT_EQ(some[r], r % 2 == 1 ? std::string() : text_of(static_cast<int>(r)));
  }
}

TEST_F(CommunicatorTest, GatherToEveryRoot) {
  for (DType t : kAllTypes) {
    for (std::size_t count : counts_with_large()) {
      for (int root = 0; root < size(); ++root) {
        SCOPED_TRACE(describe(t, ReduceOp::sum, count) + " root " + std::to_string(root));
        const Buffer send = inputs(t, rank(), count);
        Buffer out(rank() == root ? count * n() : 0, t);
        out.poison();
        comm_.gather(send.data(), out.data(), count, t, root);
        if (rank() != root) continue;
        for (int r = 0; r < size(); ++r) {
          for (std::size_t i = 0; i < count; ++i) {
            EXPECT_EQ(out[static_cast<std::size_t>(r) * count + i], value(t, r, i));
          }
        }
      }
    }
  }
}

TEST_F(CommunicatorTest, TypedFrontEnds) {
  EXPECT_EQ(comm_.allreduce_value(rank() + 1, ReduceOp::sum), size() * (size() + 1) / 2);
  EXPECT_EQ(comm_.allreduce_value(static_cast<double>(rank()), ReduceOp::max), size() - 1.0);
  EXPECT_EQ(comm_.allreduce_value(static_cast<std::int64_t>(rank()), ReduceOp::min), 0);
  const std::vector<float> ranks = comm_.allgather_value(static_cast<float>(rank()));
  ASSERT_EQ(ranks.size(), n());
  for (int r = 0; r < size(); ++r) EXPECT_EQ(ranks[static_cast<std::size_t>(r)], r);

  std::vector<bfloat16> grads(7, to_bfloat16(static_cast<float>(rank())));
  comm_.allreduce<bfloat16>(grads, ReduceOp::sum);
  for (bfloat16 g : grads) EXPECT_EQ(to_float(g), static_cast<float>(size() * (size() - 1) / 2));
  std::vector<double> data(3, rank() == 0 ? 2.5 : 0.0);
  comm_.broadcast<double>(data, 0);
  for (double d : data) EXPECT_EQ(d, 2.5);
  std::vector<std::int32_t> send(2 * n(), 1);
  std::vector<std::int32_t> recv(2, 0);
  comm_.reduce_scatter<std::int32_t>(send, recv, ReduceOp::sum);
  EXPECT_EQ(recv, std::vector<std::int32_t>(2, size()));
  std::vector<std::int32_t> gathered(n(), -1);
  comm_.allgather<std::int32_t>(std::vector<std::int32_t>{rank()}, gathered);
  for (int r = 0; r < size(); ++r) EXPECT_EQ(gathered[static_cast<std::size_t>(r)], r);
  std::vector<std::uint8_t> to_root(rank() == 0 ? n() : 0, 0);
  comm_.gather<std::uint8_t>(std::vector<std::uint8_t>{static_cast<std::uint8_t>(rank() + 1)},
                             to_root, 0);
  if (rank() == 0) {
    for (int r = 0; r < size(); ++r) EXPECT_EQ(to_root[static_cast<std::size_t>(r)], r + 1);
  }
}

// ---- nonblocking collectives ----------------------------------------------------------------

TEST_F(CommunicatorTest, NonblockingAllreduceEveryTypeOpAndCount) {
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : counts_with_large()) {
        SCOPED_TRACE(describe(t, op, count));
        const Buffer send = inputs(t, rank(), count);
        Buffer out(count, t);
        out.poison();
        Request r = comm_.iallreduce(send.data(), out.data(), count, t, op);
        while (!r.test()) {
        }
        EXPECT_TRUE(r.test());  // stays complete
        r.wait();               // and waiting again is a no-op
        EXPECT_EQ(mismatches(out, op, size()), 0u);
        EXPECT_TRUE(identical(out));

        Buffer inplace = inputs(t, rank(), count);
        comm_.iallreduce(inplace.data(), inplace.data(), count, t, op).wait();
        EXPECT_EQ(inplace.bytes, out.bytes);
      }
    }
  }
  // Count 0 completes at once.
  Request none = comm_.iallreduce(nullptr, nullptr, 0, DType::f32, ReduceOp::sum);
  EXPECT_TRUE(none.test());
}

TEST_F(CommunicatorTest, NonblockingAllreduceAlgorithms) {
  // mpi and default (for the nonblocking form: MPI's algorithm, 16-bit types included) give
  // the closed-form results; the ring is refused before anything is posted, on every rank.
  const std::size_t count = (std::size_t{1} << 20) + 1;  // the blocking default rings here
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (std::string_view algo : {std::string_view("mpi"), kDefaultAlgorithm}) {
      SCOPED_TRACE(describe(t, ReduceOp::sum, count) + " " + std::string(algo));
      Buffer b = inputs(t, rank(), count);
      comm_.iallreduce(b.data(), b.data(), count, t, ReduceOp::sum, algo).wait();
      EXPECT_EQ(mismatches(b, ReduceOp::sum, size()), 0u);
    }
  }
  const std::uint64_t issued = comm_.collectives_issued();
  float x = 1.0f;
  try {
    comm_.iallreduce(&x, &x, 1, DType::f32, ReduceOp::sum, "ring");
    FAIL() << "iallreduce accepted the ring algorithm";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("iallreduce"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(rank())), std::string::npos) << msg;
    EXPECT_NE(msg.find("ring"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CommStream"), std::string::npos) << msg;
  }
  EXPECT_EQ(comm_.collectives_issued(), issued);  // nothing was issued
  EXPECT_EQ(x, 1.0f);
  EXPECT_EQ(comm_.allreduce_value(1, ReduceOp::sum), size());  // and nothing is pending
}

TEST_F(CommunicatorTest, NonblockingReduceScatterEveryTypeOpAndCount) {
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t block : counts_with_large()) {
        SCOPED_TRACE(describe(t, op, block));
        const Buffer send = inputs(t, rank(), block * n());
        Buffer out(block, t);
        out.poison();
        comm_.ireduce_scatter(send.data(), out.data(), block, t, op).wait();
        EXPECT_EQ(mismatches(out, op, size(), static_cast<std::size_t>(rank()) * block), 0u);
      }
    }
  }
}

TEST_F(CommunicatorTest, NonblockingBroadcastAllgatherAndGather) {
  for (DType t : kAllTypes) {
    for (std::size_t count : counts_with_large()) {
      SCOPED_TRACE(describe(t, ReduceOp::sum, count));
      const int root = static_cast<int>(count % n());  // roots vary with the count
      Buffer b = rank() == root ? inputs(t, root, count) : Buffer(count, t);
      if (rank() != root) b.poison();
      comm_.ibroadcast(b.data(), count, t, root).wait();
      EXPECT_EQ(b.bytes, inputs(t, root, count).bytes);

      const Buffer expect = gathered(t, count);
      const Buffer send = inputs(t, rank(), count);
      Buffer ag(count * n(), t);
      ag.poison();
      comm_.iallgather(send.data(), ag.data(), count, t).wait();
      EXPECT_EQ(ag.bytes, expect.bytes);
      // In place: our block already sits at block rank() of the output.
      Buffer inplace(count * n(), t);
      inplace.poison();
      std::byte* own = inplace.bytes.data() + static_cast<std::size_t>(rank()) * send.bytes.size();
      std::copy(send.bytes.begin(), send.bytes.end(), own);
      comm_.iallgather(own, inplace.data(), count, t).wait();
      EXPECT_EQ(inplace.bytes, expect.bytes);

      for (int g = 0; g < size(); ++g) {
        Buffer out(rank() == g ? count * n() : 0, t);
        out.poison();
        comm_.igather(send.data(), out.data(), count, t, g).wait();
        if (rank() == g) {
          EXPECT_EQ(out.bytes, expect.bytes) << "root " << g;
        }
      }
      // In-place gather at the root.
      Buffer at_root(rank() == root ? count * n() : 0, t);
      at_root.poison();
      const void* gsend = send.data();
      if (rank() == root) {
        std::byte* slot = at_root.bytes.data() + static_cast<std::size_t>(root) * send.bytes.size();
        std::copy(send.bytes.begin(), send.bytes.end(), slot);
        gsend = slot;
      }
      comm_.igather(gsend, at_root.data(), count, t, root).wait();
      if (rank() == root) {
        EXPECT_EQ(at_root.bytes, expect.bytes);
      }
    }
  }
  EXPECT_THROW(comm_.igather(nullptr, nullptr, 1, DType::f32, size()), MpiError);
  EXPECT_THROW(comm_.igather(nullptr, nullptr, 1, DType::f32, -1), MpiError);
  comm_.ibarrier().wait();
}

TEST_F(CommunicatorTest, NonblockingAllgathervUnevenCountsIncludingZero) {
  for (std::size_t scale : {std::size_t{1}, std::size_t{3}, (std::size_t{1} << 18) + 3}) {
    const std::vector<std::size_t> counts = uneven_counts(scale);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const std::size_t offset = std::accumulate(counts.begin(), counts.begin() + rank(), std::size_t{0});
    for (DType t : kAllTypes) {
      SCOPED_TRACE(std::string(to_string(t)) + " scale " + std::to_string(scale));
      const Buffer expect = gathered_v(t, counts);
      const std::size_t mine = counts[static_cast<std::size_t>(rank())];
      const Buffer send = inputs(t, rank(), mine);
      Buffer out(total, t);
      out.poison();
      Request r;
      {
        // The counts need not outlive the call: the request keeps its own copy.
        const std::vector<std::size_t> scratch = counts;
        r = comm_.iallgatherv(send.data(), mine, out.data(), scratch, t);
      }
      r.wait();
      EXPECT_EQ(out.bytes, expect.bytes);
      // In place: our block already sits at its offset in the output.
      Buffer inplace(total, t);
      inplace.poison();
      std::byte* own = inplace.bytes.data() + offset * dtype_bytes(t);
      std::copy(send.bytes.begin(), send.bytes.end(), own);
      comm_.iallgatherv(own, mine, inplace.data(), counts, t).wait();
      EXPECT_EQ(inplace.bytes, expect.bytes);
    }
  }
  // Every count zero completes at once.
  const std::vector<std::size_t> zeros(n(), 0);
  Request none = comm_.iallgatherv(nullptr, 0, nullptr, zeros, DType::f32);
  EXPECT_TRUE(none.test());
  // Counts that do not fit throw before anything is posted.
  const std::vector<std::size_t> wrong_length(n() + 1, 1);
  float x = 0.0f;
  EXPECT_THROW(comm_.iallgatherv(&x, 1, &x, wrong_length, DType::f32), std::invalid_argument);
  const std::vector<std::size_t> wrong_own(n(), 2);
  EXPECT_THROW(comm_.iallgatherv(&x, 1, &x, wrong_own, DType::f32), std::invalid_argument);
}

TEST_F(CommunicatorTest, NonblockingCollectivesCompleteInAnyOrder) {
  // Several collectives in flight at once, completed in issue order on even ranks and in
  // reverse order on odd ranks (MPI allows any order).
  const std::size_t count = 4099;
  const DType t = DType::bf16;
  const Buffer send = inputs(t, rank(), count);
  Buffer sum(count, t);
  Buffer avg(count, t);
  Buffer ag(count * n(), t);
  const std::vector<std::size_t> counts = uneven_counts(7);
  Buffer agv(std::accumulate(counts.begin(), counts.end(), std::size_t{0}), t);
  const Buffer agv_send = inputs(t, rank(), counts[static_cast<std::size_t>(rank())]);
  Buffer gathered_at_0(rank() == 0 ? count * n() : 0, t);
  std::vector<Request> reqs;
  reqs.push_back(comm_.iallreduce(send.data(), sum.data(), count, t, ReduceOp::sum));
  reqs.push_back(comm_.iallgatherv(agv_send.data(), agv_send.count, agv.data(), counts, t));
  reqs.push_back(comm_.iallreduce(send.data(), avg.data(), count, t, ReduceOp::avg));
  reqs.push_back(comm_.igather(send.data(), gathered_at_0.data(), count, t, 0));
  reqs.push_back(comm_.iallgather(send.data(), ag.data(), count, t));
  if (rank() % 2 == 1) std::reverse(reqs.begin(), reqs.end());
  for (Request& r : reqs) r.wait();
  EXPECT_EQ(mismatches(sum, ReduceOp::sum, size()), 0u);
  EXPECT_EQ(mismatches(avg, ReduceOp::avg, size()), 0u);
  EXPECT_EQ(ag.bytes, gathered(t, count).bytes);
  EXPECT_EQ(agv.bytes, gathered_v(t, counts).bytes);
  if (rank() == 0) {
    EXPECT_EQ(gathered_at_0.bytes, gathered(t, count).bytes);
  }
}

TEST_F(CommunicatorTest, RequestDestructorAndMoveWait) {
  const std::size_t count = 4099;
  Buffer a = inputs(DType::f32, rank(), count);
  Buffer b = inputs(DType::bf16, rank(), count);
  {
    Request r = comm_.iallreduce(a.data(), a.data(), count, DType::f32, ReduceOp::sum);
    Request moved = std::move(r);
    r.wait();  // moved-from: nothing to wait for
    // `moved` goes out of scope unfinished: its destructor waits.
  }
  EXPECT_EQ(mismatches(a, ReduceOp::sum, size()), 0u);
  Request first = comm_.iallreduce(b.data(), b.data(), count, DType::bf16, ReduceOp::avg);
  first = comm_.ibarrier();  // assigning over an unfinished request waits for it
  EXPECT_EQ(mismatches(b, ReduceOp::avg, size()), 0u);
  first.wait();
  Request empty;
  EXPECT_TRUE(empty.test());
  empty.wait();
}

// ---- splitting into pieces --------------------------------------------------------------------

TEST_F(CommunicatorTest, PiecesWhenCountsExceedThePerCallLimit) {
  EXPECT_EQ(comm_.max_call_count(), static_cast<std::size_t>(2147483647));
  comm_.set_max_call_count(0);
  EXPECT_EQ(comm_.max_call_count(), 1u);
  comm_.set_max_call_count(7);  // every call below is split, and every fallback path runs
  const std::size_t count = 100;  // not a multiple of 7
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      SCOPED_TRACE(describe(t, op, count));
      for (std::string_view algo : test::runnable_algorithms(comm_, Collective::allreduce)) {
        Buffer out = inputs(t, rank(), count);
        comm_.allreduce(out.data(), out.data(), count, t, op, algo);
        EXPECT_EQ(mismatches(out, op, size()), 0u) << algo;
      }
      Buffer iout(count, t);
      const Buffer send = inputs(t, rank(), count);
      comm_.iallreduce(send.data(), iout.data(), count, t, op).wait();
      EXPECT_EQ(mismatches(iout, op, size()), 0u);

      const std::size_t block = 10;  // > 7: one reduce per rank, in pieces
      const Buffer rs_send = inputs(t, rank(), block * n());
      Buffer rs_out(block, t);
      rs_out.poison();
      comm_.reduce_scatter(rs_send.data(), rs_out.data(), block, t, op);
      EXPECT_EQ(mismatches(rs_out, op, size(), block * static_cast<std::size_t>(rank())), 0u);
      rs_out.poison();
      comm_.ireduce_scatter(rs_send.data(), rs_out.data(), block, t, op).wait();
      EXPECT_EQ(mismatches(rs_out, op, size(), block * static_cast<std::size_t>(rank())), 0u);
    }
    SCOPED_TRACE(std::string(to_string(t)));
    Buffer b = rank() == 0 ? inputs(t, 0, count) : Buffer(count, t);
    comm_.broadcast(b.data(), count, t, 0);
    EXPECT_EQ(b.bytes, inputs(t, 0, count).bytes);
    Buffer ib = rank() == 0 ? inputs(t, 0, count) : Buffer(count, t);
    comm_.ibroadcast(ib.data(), count, t, 0).wait();
    EXPECT_EQ(ib.bytes, inputs(t, 0, count).bytes);

    const std::size_t block = 9;
    Buffer expect(block * n(), t);
    for (int r = 0; r < size(); ++r) {
      for (std::size_t i = 0; i < block; ++i) expect.set(static_cast<std::size_t>(r) * block + i, value(t, r, i));
    }
    const Buffer send = inputs(t, rank(), block);
    Buffer ag(block * n(), t);
    ag.poison();
    comm_.allgather(send.data(), ag.data(), block, t);
    EXPECT_EQ(ag.bytes, expect.bytes);
    ag.poison();
    comm_.iallgather(send.data(), ag.data(), block, t).wait();
    EXPECT_EQ(ag.bytes, expect.bytes);
    std::vector<std::size_t> counts(n(), block);
    ag.poison();
    comm_.allgatherv(send.data(), block, ag.data(), counts, t);
    EXPECT_EQ(ag.bytes, expect.bytes);
    ag.poison();
    comm_.iallgatherv(send.data(), block, ag.data(), counts, t).wait();
    EXPECT_EQ(ag.bytes, expect.bytes);
    for (int root = 0; root < size(); ++root) {
      Buffer g(rank() == root ? block * n() : 0, t);
      g.poison();
      comm_.gather(send.data(), g.data(), block, t, root);
      if (rank() == root) {
        EXPECT_EQ(g.bytes, expect.bytes);
      }
      g.poison();
      comm_.igather(send.data(), g.data(), block, t, root).wait();
      if (rank() == root) {
        EXPECT_EQ(g.bytes, expect.bytes);
      }
    }
  }
}

// ---- communicators handed in by the host --------------------------------------------------------
// These tests play the HPC host: it calls MPI itself to make its own communicator and hands
// mpitrain the Fortran handle.

TEST_F(CommunicatorTest, HalvesOfTheWorldFromFortranHandles) {
  // World ranks [0, h) form the lower half and [h, size) the upper one, h = ceil(size / 2)
  // (one rank: only the lower half; three ranks: halves of 2 and 1).
  const int h = (size() + 1) / 2;
  const int half = rank() < h ? 0 : 1;
  const int first = half == 0 ? 0 : h;
  const int members = half == 0 ? h : size() - h;
  MPI_Comm host = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, half, rank(), &host), MPI_SUCCESS);
  Communicator sub(runtime_, static_cast<std::int64_t>(MPI_Comm_c2f(host)));
  // The host keeps ownership: mpitrain works on its own duplicate, so freeing the host's
  // communicator now leaves `sub` working.
  ASSERT_EQ(MPI_Comm_free(&host), MPI_SUCCESS);

  EXPECT_EQ(sub.size(), members);
  EXPECT_EQ(sub.rank(), rank() - first);
  EXPECT_GE(sub.local_size(), 1);
  EXPECT_LE(sub.local_size(), sub.size());
  EXPECT_GE(sub.node_count(), 1);
  EXPECT_LE(sub.node_count(), comm_.node_count());
  // The sum of the world ranks of the half: first + (first + 1) + ... + (first + members - 1).
  EXPECT_EQ(sub.allreduce_value(rank(), ReduceOp::sum), members * first + members * (members - 1) / 2);
  EXPECT_EQ(sub.allreduce_value(rank(), ReduceOp::min), first);
  EXPECT_EQ(sub.allgather_value(rank()).size(), static_cast<std::size_t>(members));

  // Every type, op and algorithm over the half's ranks (the closed form of sub.size() ranks),
  // both halves at the same time.
  for (std::string_view algo : test::runnable_algorithms(sub, Collective::allreduce)) {
    for (DType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (std::size_t count : {std::size_t{1}, std::size_t{5}, (std::size_t{1} << 16) + 3}) {
          SCOPED_TRACE(describe(t, op, count) + " " + std::string(algo) + " half " +
                       std::to_string(half));
          Buffer b = inputs(t, sub.rank(), count);
          sub.allreduce(b.data(), b.data(), count, t, op, algo);
          EXPECT_EQ(mismatches(b, op, sub.size()), 0u);
          EXPECT_TRUE(test::identical_on_all_ranks(sub, b.data(), b.bytes.size()));
        }
      }
    }
  }
  Buffer nb = inputs(DType::f32, sub.rank(), 1001);
  sub.iallreduce(nb.data(), nb.data(), 1001, DType::f32, ReduceOp::avg).wait();
  EXPECT_EQ(mismatches(nb, ReduceOp::avg, sub.size()), 0u);
  // The world communicator is untouched by the halves' traffic.
  EXPECT_EQ(comm_.allreduce_value(1, ReduceOp::sum), size());
}

TEST_F(CommunicatorTest, WorldFromItsFortranHandleMatchesTheDefault) {
  Communicator world(runtime_, static_cast<std::int64_t>(MPI_Comm_c2f(MPI_COMM_WORLD)));
  EXPECT_EQ(world.rank(), comm_.rank());
  EXPECT_EQ(world.size(), comm_.size());
  EXPECT_EQ(world.local_rank(), comm_.local_rank());
  EXPECT_EQ(world.node_index(), comm_.node_index());
  EXPECT_EQ(world.allreduce_value(rank() + 1, ReduceOp::sum), size() * (size() + 1) / 2);
}

TEST_F(CommunicatorTest, FortranHandleThatNamesNoCommunicatorThrows) {
  // MPI_COMM_NULL's handle, a negative one, one past any table, one wider than MPI_Fint.
  const std::int64_t null_handle = MPI_Comm_c2f(MPI_COMM_NULL);
  for (std::int64_t bad : {null_handle, std::int64_t{-1}, std::int64_t{1} << 20,
                           std::int64_t{1} << 40}) {
    try {
      Communicator c(runtime_, bad);
      FAIL() << "accepted Fortran handle " << bad;
    } catch (const MpiError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.code(), MPI_ERR_COMM);
      EXPECT_NE(msg.find("Fortran handle " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank " + std::to_string(rank())), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(comm_.allreduce_value(1, ReduceOp::sum), size());  // nothing was left half-done
}

// ---- errors and counting ----------------------------------------------------------------------

TEST_F(CommunicatorTest, InvalidRootThrowsNamingCallAndRank) {
  float x = 1.0f;
  const std::string where = "rank " + std::to_string(rank());
  try {
    comm_.broadcast(&x, 1, DType::f32, size());
    FAIL() << "broadcast accepted root " << size();
  } catch (const MpiError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("MPI_Bcast"), std::string::npos) << msg;
    EXPECT_NE(msg.find(where), std::string::npos) << msg;
    EXPECT_NE(msg.find("root " + std::to_string(size())), std::string::npos) << msg;
    EXPECT_NE(e.code(), 0);
  }
  EXPECT_THROW(comm_.gather(&x, &x, 1, DType::f32, -1), MpiError);
  EXPECT_THROW(comm_.ibroadcast(&x, 1, DType::f32, 99), MpiError);
  // The communicator still works after the errors.
  EXPECT_EQ(comm_.allreduce_value(1, ReduceOp::sum), size());
}

TEST_F(CommunicatorTest, MismatchedSizesThrowNamingCallAndRank) {
  std::vector<float> send(4, 1.0f);
  std::vector<float> recv(3, 0.0f);
  try {
    comm_.allreduce<float>(send, recv, ReduceOp::sum);
    FAIL() << "allreduce accepted spans of 4 and 3";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("allreduce"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(rank())), std::string::npos) << msg;
    EXPECT_NE(msg.find('4'), std::string::npos) << msg;
  }
  std::vector<float> small(1);
  EXPECT_THROW(comm_.reduce_scatter<float>(small, small, ReduceOp::sum),
               std::invalid_argument);  // send must hold size() * recv.size() (and differ)
  EXPECT_THROW(comm_.allgather<float>(send, recv), std::invalid_argument);
  std::vector<std::size_t> wrong_length(n() + 1, 1);
  EXPECT_THROW(comm_.allgatherv<float>(std::span<const float>(send.data(), 1), recv, wrong_length),
               std::invalid_argument);
  std::vector<std::size_t> wrong_own(n(), 2);
  EXPECT_THROW(comm_.allgatherv<float>(std::span<const float>(send.data(), 1), recv, wrong_own),
               std::invalid_argument);
  float same[4] = {0, 0, 0, 0};
  EXPECT_THROW(comm_.reduce_scatter(same, same, 1, DType::f32, ReduceOp::sum),
               std::invalid_argument);
  // shm reads a rank's own block from send while it writes recv: recv inside send (MPI's
  // in-place form, block rank() of send) is refused, not computed wrong.
  std::vector<float> blocks(4 * n(), 1.0f);
  EXPECT_THROW(comm_.reduce_scatter(blocks.data(), blocks.data() + 4 * static_cast<std::size_t>(rank()),
                                    4, DType::f32, ReduceOp::sum, "shm"),
               std::invalid_argument);
}

TEST_F(CommunicatorTest, CountsOneIssuedCollectivePerCall) {
  comm_.set_max_call_count(3);  // many MPI calls per collective: still one each
  const std::uint64_t before = comm_.collectives_issued();
  std::vector<float> v(10, 1.0f);
  std::vector<float> big(10 * n(), 1.0f);
  comm_.barrier();
  comm_.allreduce<float>(v, ReduceOp::sum);
  comm_.allreduce<float>(v, ReduceOp::sum, "ring");
  comm_.allreduce(nullptr, nullptr, 0, DType::f32, ReduceOp::sum);  // count 0 counts too
  comm_.broadcast<float>(v, 0);
  comm_.reduce_scatter<float>(big, v, ReduceOp::sum);
  comm_.allgather<float>(v, big);
  comm_.iallreduce(v.data(), v.data(), v.size(), DType::f32, ReduceOp::max).wait();
  comm_.ibarrier().wait();
  (void)comm_.allreduce_value(1, ReduceOp::sum);
  std::vector<std::size_t> counts(n(), v.size());
  comm_.iallgatherv(v.data(), v.size(), big.data(), counts, DType::f32).wait();
  comm_.igather(v.data(), big.data(), v.size(), DType::f32, 0).wait();
  EXPECT_EQ(comm_.collectives_issued() - before, 12u);
}

TEST_F(CommunicatorTest, MovedCommunicatorKeepsWorking) {
  const std::uint64_t issued = comm_.collectives_issued();
  Communicator moved(std::move(comm_));
  EXPECT_EQ(moved.collectives_issued(), issued);
  EXPECT_EQ(moved.allreduce_value(2, ReduceOp::sum), 2 * moved.size());
  Communicator other(runtime_);
  other = std::move(moved);
  EXPECT_EQ(other.allreduce_value(1, ReduceOp::sum), other.size());
  comm_ = std::move(other);  // the fixture's communicator back, for its destructor
  EXPECT_EQ(comm_.allreduce_value(1, ReduceOp::max), 1);
}

// Sets an environment variable for its lifetime, then removes it (also when a test fails).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A table that sends every allreduce to the ring (the built-in table never does below 8 KiB).
constexpr const char* kRingTable =
    R"({"format": "mpitrain-algorithm-table", "version": 1, "rules": [)"
    R"({"op": "allreduce", "types": "*", "reduces": "*", "algorithm": "ring"}]})";

// The table was loaded before the communicator knew its size, so at 2 ranks or more the
// ranks' agreement on it threw "recv_counts has 1 entries for 2 ranks" for any table.
TEST_F(CommunicatorTest, AlgorithmTableFromTheEnvironmentIsUsedOnEveryRank) {
  const test_support::SharedTempDir dir(comm_, "algorithm_table_env");
  if (rank() == 0) std::ofstream(dir / "ring.json") << kRingTable;
  comm_.barrier();
  const ScopedEnv env("MPITRAIN_ALGORITHM_TABLE", (dir / "ring.json").string());
  const Communicator with_table(runtime_);
  EXPECT_EQ(with_table.default_allreduce_algorithm(100, DType::f32, ReduceOp::sum), "ring");
  EXPECT_EQ(comm_.algorithm_selection().digest(), AlgorithmSelection::builtin().digest());
  // 1 + 2 + ... + n on every rank, through the table's algorithm.
  std::vector<float> v(100, static_cast<float>(rank() + 1));
  with_table.allreduce(v.data(), v.data(), v.size(), DType::f32, ReduceOp::sum);
  EXPECT_EQ(v[99], static_cast<float>(size() * (size() + 1) / 2));
}

TEST_F(CommunicatorTest, ABadAlgorithmTableFromTheEnvironmentThrowsNamingItOnEveryRank) {
  const test_support::SharedTempDir dir(comm_, "algorithm_table_env_bad");
  if (rank() == 0) std::ofstream(dir / "cut.json") << R"({"format": "mpitrain-algo)";
  comm_.barrier();
  const std::string path = (dir / "cut.json").string();
  const ScopedEnv env("MPITRAIN_ALGORITHM_TABLE", path);
  try {
    const Communicator with_table(runtime_);
    ADD_FAILURE() << "rank " << rank() << ": expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("algorithm table " + path), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0: "), std::string::npos) << e.what();
  }
  // The failed constructions freed what they made: this communicator still works.
  EXPECT_EQ(comm_.allreduce_value(1, ReduceOp::sum), size());
}

// cannot_run asked about shm's reduce_scatter with null stand-ins for both buffers, which
// shm's overlap check took for overlapping ones: collective_bench --algo all (and --tune)
// left shm out of every reduce_scatter.
TEST_F(CommunicatorTest, CannotRunAnswersForTheAlgorithmNotForStandInBuffers) {
  for (Collective op : {Collective::allreduce, Collective::reduce_scatter,
                        Collective::allgather, Collective::broadcast}) {
    for (DType type : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      const std::string why = comm_.cannot_run("shm", op, type);
      if (comm_.node_count() == 1) {
        EXPECT_EQ(why, "") << "op " << static_cast<int>(op) << ", " << to_string(type);
      } else {
        EXPECT_NE(why.find("nodes"), std::string::npos) << why;
      }
    }
  }
  if (comm_.node_count() > 1) return;
  // And the call it allows runs: block r of the sum of every rank's (i + rank) is
  // n * i + n (n - 1) / 2, i the element's index in send.
  const std::size_t block = 3;
  std::vector<float> send(n() * block), recv(block);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(i + rank());
  comm_.reduce_scatter(send.data(), recv.data(), block, DType::f32, ReduceOp::sum, "shm");
  for (std::size_t j = 0; j < block; ++j) {
    const std::size_t i = static_cast<std::size_t>(rank()) * block + j;
    EXPECT_EQ(recv[j], static_cast<float>(n() * i + n() * (n() - 1) / 2)) << j;
  }
}

}  // namespace
}  // namespace mpitrain
