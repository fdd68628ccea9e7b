// GradientSync: bucket layout, gradients living in the buckets, summed results in closed
// form, order independence, no communication outside a synchronising backward, overlap on
// and off bit for bit (reductions on the worker or on the calling thread, chosen by the
// affinity mask when automatic), 16-bit wire types (each rank's gradient rounded once before the sum),
// the reductions' answer on finiteness, unused parameters under both policies.

#include "mpitrain/engine/gradient_sync.hpp"

#include <gtest/gtest.h>
#include <sched.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/collectives/comm_stream.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/engine/cores_of_this_thread.hpp"
#include "mpitrain/nn/parameter.hpp"

namespace mpitrain {
namespace {

// Parameters named p0..p{n-1} with the given numels; grad values set by fill_grads.
std::vector<std::unique_ptr<nn::Parameter>> make_params(const std::vector<std::size_t>& numels) {
  std::vector<std::unique_ptr<nn::Parameter>> params;
  for (std::size_t k = 0; k < numels.size(); ++k) {
    auto p = std::make_unique<nn::Parameter>();
    p->name = std::string("p").append(std::to_string(k));
    p->value = Tensor({numels[k]});
    p->grad = Tensor({numels[k]});
    params.push_back(std::move(p));
  }
  return params;
}

std::vector<SyncedParameter> synced(const std::vector<std::unique_ptr<nn::Parameter>>& params) {
  std::vector<SyncedParameter> out;
  for (const auto& p : params) out.push_back({p.get(), {}});
  return out;
}

// grad of parameter k, element i on rank r: (r + 1) * (k + 1) + (i % 5): small integers, so
// sums are exact in every wire type.
float grad_value(int r, std::size_t k, std::size_t i) {
  return static_cast<float>((r + 1) * static_cast<int>(k + 1) + static_cast<int>(i % 5));
}
// Returns the sum over n ranks of grad_value.
float summed_value(int n, std::size_t k, std::size_t i) {
  return static_cast<float>(n * (n + 1) / 2 * static_cast<int>(k + 1) + n * static_cast<int>(i % 5));
}

void fill_grads(std::vector<std::unique_ptr<nn::Parameter>>& params, int rank) {
  for (std::size_t k = 0; k < params.size(); ++k) {
    for (std::size_t i = 0; i < params[k]->grad.numel(); ++i) params[k]->grad[i] = grad_value(rank, k, i);
  }
}

class GradientSyncTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
  CommStream stream_{comm_};
};

TEST_F(GradientSyncTest, BucketsFollowReverseRegistrationOrderAndCaps) {
  // f32 wire: 4 bytes per value. First bucket cap 40 bytes, the others 80 bytes.
  auto params = make_params({6, 30, 4, 12, 3, 8, 5});
  for (std::size_t k = 0; k < params.size(); ++k) params[k]->grad.fill(static_cast<float>(k));
  GradientSyncOptions options;
  options.first_bucket_bytes = 40;
  options.bucket_cap_bytes = 80;
  GradientSync sync(synced(params), stream_, options);
  const auto& b = sync.buckets();
  // Reverse order p6(20 B) p5(32) p4(12) p3(48) p2(16) p1(120) p0(24):
  // [p6] (+p5 would pass 40) [p5 p4] (+p3 would pass 80) [p3 p2] [p1] (alone, over the cap) [p0]
  ASSERT_EQ(b.size(), 5u);
  EXPECT_EQ(b[0].params, (std::vector<std::size_t>{6}));
  EXPECT_EQ(b[1].params, (std::vector<std::size_t>{5, 4}));
  EXPECT_EQ(b[2].params, (std::vector<std::size_t>{3, 2}));
  EXPECT_EQ(b[3].params, (std::vector<std::size_t>{1}));
  EXPECT_EQ(b[4].params, (std::vector<std::size_t>{0}));
  EXPECT_EQ(b[1].count, 11u);
  EXPECT_EQ(b[1].wire_bytes, 44u);
  EXPECT_EQ(b[4].wire_bytes, 28u);  // p0 and the unused-count element
  const auto spans = sync.gradient_spans();
  ASSERT_EQ(spans.size(), b.size());
  for (std::size_t j = 0; j < b.size(); ++j) {
    EXPECT_EQ(spans[j].size(), b[j].count);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(spans[j].data()) % 64, 0u) << "bucket " << j;
  }
  // Gradients now live in the buckets, with their values kept.
  for (std::size_t k = 0; k < params.size(); ++k) {
    EXPECT_TRUE(params[k]->grad.is_view()) << params[k]->name;
    EXPECT_EQ(params[k]->grad.data(), sync.gradient_slot(k).data()) << params[k]->name;
    for (std::size_t i = 0; i < params[k]->grad.numel(); ++i) {
      ASSERT_EQ(params[k]->grad[i], static_cast<float>(k)) << params[k]->name;
    }
  }
}

TEST_F(GradientSyncTest, BucketBytesCountTheWireType) {
  auto params = make_params({10, 10, 10});
  GradientSyncOptions options;
  options.first_bucket_bytes = 40;
  options.bucket_cap_bytes = 40;
  options.comm_dtype = DType::bf16;  // 20 bytes per parameter: two per bucket
  GradientSync sync(synced(params), stream_, options);
  ASSERT_EQ(sync.buckets().size(), 2u);
  EXPECT_EQ(sync.buckets()[0].params, (std::vector<std::size_t>{2, 1}));
  EXPECT_EQ(sync.buckets()[1].wire_bytes, 22u);
}

TEST_F(GradientSyncTest, DestructionGivesGradientsTheirOwnStorageBack) {
  auto params = make_params({7, 3});
  {
    GradientSync sync(synced(params), stream_, {});
    params[0]->grad.fill(2.5f);
  }
  EXPECT_FALSE(params[0]->grad.is_view());
  ASSERT_EQ(params[0]->grad.numel(), 7u);
  EXPECT_EQ(params[0]->grad[6], 2.5f);
}

struct SyncCase {
  bool overlap;
  DType dtype;
  bool forward_order;  // report readiness in registration order (every bucket waits)
  ReduceOn reduce_on = ReduceOn::worker;
};

class GradientSyncSum : public GradientSyncTest, public ::testing::WithParamInterface<SyncCase> {};

TEST_P(GradientSyncSum, SumsEveryGradientInClosedForm) {
  const SyncCase c = GetParam();
  const int n = comm_.size();
  const int r = comm_.rank();
  auto params = make_params({300, 17, 1, 4096, 64, 5});
  GradientSyncOptions options;
  options.first_bucket_bytes = 256;
  options.bucket_cap_bytes = 2048;
  options.overlap = c.overlap;
  options.comm_dtype = c.dtype;
  options.reduce_on = c.reduce_on;
  GradientSync sync(synced(params), stream_, options);
  ASSERT_GE(sync.buckets().size(), 3u);
  fill_grads(params, r);
  const auto issued_before = comm_.collectives_issued();
  sync.begin_sync();
  // Ranks may report in different orders: rank 1 reports in registration order.
  const bool forward = c.forward_order || r == 1;
  for (std::size_t j = 0; j < params.size(); ++j) {
    sync.mark_ready(*params[forward ? j : params.size() - 1 - j]);
  }
  const SyncReport report = sync.finish();
  EXPECT_FALSE(sync.in_sync());
  EXPECT_EQ(report.unused_local, 0u);
  EXPECT_EQ(report.ranks_with_unused, 0u);
  const auto issued = comm_.collectives_issued() - issued_before;
  EXPECT_EQ(issued, n > 1 ? sync.buckets().size() : 0u);
  for (std::size_t k = 0; k < params.size(); ++k) {
    for (std::size_t i = 0; i < params[k]->grad.numel(); ++i) {
      ASSERT_EQ(params[k]->grad[i], summed_value(n, k, i)) << params[k]->name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GradientSyncSum,
    ::testing::Values(SyncCase{true, DType::f32, false}, SyncCase{false, DType::f32, false},
                      SyncCase{true, DType::f32, true}, SyncCase{true, DType::bf16, false},
                      SyncCase{false, DType::f16, true},
                      SyncCase{true, DType::f32, false, ReduceOn::caller},
                      SyncCase{true, DType::f32, true, ReduceOn::caller},
                      SyncCase{true, DType::f16, false, ReduceOn::caller}),
    [](const auto& info) {
      return std::string(info.param.overlap ? "overlap" : "no_overlap") + "_" +
             std::string(to_string(info.param.dtype)) +
             (info.param.forward_order ? "_forward" : "_reverse") +
             (info.param.reduce_on == ReduceOn::caller ? "_on_caller" : "");
    });

TEST_F(GradientSyncTest, ASynchroniserMadeAgainMapsNoMoreSharedMemory) {
  // An engine prepared again on the same communicator (a sweep in one job) builds a new
  // synchroniser. On one node the buckets live in the shared segment: the old synchroniser's
  // go back at the new one's allocation, so what is mapped stays one storage (whole pages),
  // not one per synchroniser. Each round's reduction, read in place, is still exact.
  constexpr std::size_t kPage = 4096;
  const int n = comm_.size();
  auto params = make_params({4096, 1024, 2048, 64});
  const bool shared = n > 1 && comm_.node_count() == 1;
  const std::size_t before = comm_.shared_bytes_mapped();
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    GradientSync sync(synced(params), stream_, GradientSyncOptions{});
    const std::size_t storage = sync.memory().gradient_bytes;
    ASSERT_GT(storage, 0u);
    EXPECT_EQ(comm_.shared_bytes_mapped() - before,
              shared ? (storage + kPage - 1) / kPage * kPage : 0u);
    fill_grads(params, comm_.rank());
    sync.begin_sync();
    for (const auto& p : params) sync.mark_ready(*p);
    sync.finish();
    for (std::size_t k = 0; k < params.size(); ++k) {
      for (std::size_t i = 0; i < params[k]->grad.numel(); ++i) {
        ASSERT_EQ(params[k]->grad[i], summed_value(n, k, i)) << params[k]->name << "[" << i << "]";
      }
    }
  }
}

TEST_F(GradientSyncTest, ReportsWhetherTheReducedGradientsAreFinite) {
  // Ranks of one node keep their buckets in the shared segment, where shm reduces them in
  // place and checks what it combined: the report says per bucket whether every reduced
  // gradient is finite, the same on every rank, also when one rank alone holds the inf, and
  // "finite" again once it is gone. A bucket under 2 KiB is copied in (no answer), one rank
  // reduces nothing (an empty report), and a 16-bit wire takes a path that does not look.
  const int n = comm_.size();
  // Reverse registration order: p3 (64 values, 256 bytes) alone in the first bucket, then
  // p2 + p1 (12 KiB), then p0 (16 KiB).
  auto params = make_params({4096, 1024, 2048, 64});
  for (DType wire : {DType::f32, DType::bf16}) {
    GradientSyncOptions options;
    options.first_bucket_bytes = 256;
    options.bucket_cap_bytes = 12 << 10;
    options.comm_dtype = wire;
    GradientSync sync(synced(params), stream_, options);
    ASSERT_EQ(sync.buckets().size(), 3u);
    ASSERT_EQ(sync.buckets()[1].params, (std::vector<std::size_t>{2, 1}));
    const bool answers = n > 1 && comm_.node_count() == 1 && wire == DType::f32;
    for (int holder : {-1, 0, -1, n - 1}) {
      SCOPED_TRACE(std::string(to_string(wire)) + ", inf in p1 on rank " + std::to_string(holder));
      fill_grads(params, comm_.rank());
      if (comm_.rank() == holder) params[1]->grad[7] = std::numeric_limits<float>::infinity();
      sync.begin_sync();
      for (const auto& p : params) sync.mark_ready(*p);
      const SyncReport report = sync.finish();
      ASSERT_EQ(report.bucket_finite.size(), n > 1 ? 3u : 0u);
      if (n == 1) continue;
      EXPECT_FALSE(report.bucket_finite[0].has_value()) << "256 bytes: copied in, not checked";
      ASSERT_EQ(report.bucket_finite[1].has_value(), answers);
      ASSERT_EQ(report.bucket_finite[2].has_value(), answers);
      if (answers) {
        EXPECT_EQ(*report.bucket_finite[1], holder < 0);
        EXPECT_TRUE(*report.bucket_finite[2]);
      }
    }
  }
}

TEST_F(GradientSyncTest, SixteenBitWireRoundsEachRanksGradientOnceBeforeSumming) {
  // Rank r's gradients are 2^r * (1 + 3/8 ulp): each rounds to 2^r in the wire type, and the
  // partial sums of distinct powers of two are exact, so the result is exactly 2^n - 1. Summing
  // in fp32 first would give (2^n - 1)(1 + 3/8 ulp), which rounds up at 2-4 ranks. One rank
  // communicates nothing, so its gradients stay as they are. One parameter's bucket (20000 values, 40 KB as sent) is large enough
  // for the fused ring, the others go through MPI (see default_wire_allreduce_algorithm).
  const int n = comm_.size();
  const int r = comm_.rank();
  for (DType wire : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(to_string(wire)));
    const float ulp_at_one = wire == DType::bf16 ? 0x1p-7f : 0x1p-10f;
    const float g = std::ldexp(1.0f + 0.375f * ulp_at_one, r);
    auto params = make_params({20000, 100, 3});
    GradientSyncOptions options;
    options.first_bucket_bytes = 8;
    options.bucket_cap_bytes = 256;
    options.comm_dtype = wire;
    GradientSync sync(synced(params), stream_, options);
    ASSERT_EQ(sync.buckets().size(), 3u);
    for (auto& p : params) {
      for (std::size_t i = 0; i < p->grad.numel(); ++i) p->grad[i] = g;
    }
    sync.begin_sync();
    for (auto it = params.rbegin(); it != params.rend(); ++it) sync.mark_ready(**it);
    sync.finish();
    const float expected = n == 1 ? g : static_cast<float>((1 << n) - 1);
    for (const auto& p : params) {
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < p->grad.numel(); ++i) wrong += p->grad[i] != expected;
      EXPECT_EQ(wrong, 0u) << p->name << ": " << p->grad[0] << " instead of " << expected;
    }
  }
}

TEST_F(GradientSyncTest, NoCollectiveOutsideASynchronisingBackward) {
  auto params = make_params({100, 200});
  GradientSync sync(synced(params), stream_, {});
  const auto before = comm_.collectives_issued();
  for (int micro = 0; micro < 3; ++micro) {
    for (auto it = params.rbegin(); it != params.rend(); ++it) sync.mark_ready(**it);
  }
  stream_.synchronize();
  EXPECT_EQ(comm_.collectives_issued(), before);
  EXPECT_EQ(stream_.tasks_finished(), 0u);
}

TEST_F(GradientSyncTest, OverlapOnAndOffAgreeBitForBit) {
  // Overlap on with the reductions on the worker thread and on the calling thread (inside
  // mark_ready), and overlap off: the same bits; with overlap on, every bucket leaves during
  // "backward" (before finish) either way.
  const int r = comm_.rank();
  std::vector<std::vector<float>> results;
  struct Way {
    bool overlap;
    ReduceOn on;
  };
  for (Way way : {Way{true, ReduceOn::worker}, Way{true, ReduceOn::caller}, Way{false, ReduceOn::worker}}) {
    const ReduceOn on = way.on;
    auto params = make_params({1000, 33, 2000, 7});
    GradientSyncOptions options;
    options.first_bucket_bytes = 512;
    options.bucket_cap_bytes = 4096;
    options.overlap = way.overlap;
    options.reduce_on = on;
    GradientSync sync(synced(params), stream_, options);
    EXPECT_EQ(sync.reduce_on(), on);
    for (std::size_t k = 0; k < params.size(); ++k) {
      for (std::size_t i = 0; i < params[k]->grad.numel(); ++i) {
        params[k]->grad[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(k)) /
                             static_cast<float>(3 + r);
      }
    }
    sync.begin_sync();
    const auto issued_before = comm_.collectives_issued();
    for (auto it = params.rbegin(); it != params.rend(); ++it) sync.mark_ready(**it);
    if (way.overlap && on == ReduceOn::caller && comm_.size() > 1) {
      EXPECT_EQ(comm_.collectives_issued() - issued_before, sync.buckets().size())
          << "reduced inside mark_ready, before finish";
    }
    const SyncReport report = sync.finish();
    if (options.overlap && comm_.size() > 1) {
      EXPECT_EQ(report.buckets_launched_early, sync.buckets().size());
    }
    std::vector<float> all;
    for (const auto& p : params) all.insert(all.end(), p->grad.data(), p->grad.data() + p->grad.numel());
    results.push_back(std::move(all));
  }
  for (std::size_t k = 1; k < results.size(); ++k) {
    ASSERT_EQ(results[0].size(), results[k].size());
    EXPECT_EQ(std::memcmp(results[0].data(), results[k].data(), results[0].size() * sizeof(float)), 0);
  }
  // And every rank holds the same bits.
  std::vector<float> rank0 = results[0];
  comm_.broadcast(std::span<float>(rank0), 0);
  EXPECT_EQ(std::memcmp(rank0.data(), results[0].data(), rank0.size() * sizeof(float)), 0);
}

// Restores the calling thread's affinity mask when it goes out of scope.
class AffinityRestorer {
 public:
  AffinityRestorer() { ok_ = sched_getaffinity(0, sizeof(saved_), &saved_) == 0; }
  ~AffinityRestorer() {
    if (ok_) sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  AffinityRestorer(const AffinityRestorer&) = delete;
  AffinityRestorer& operator=(const AffinityRestorer&) = delete;
  // Returns true once the calling thread is bound to one CPU of its saved mask alone: the
  // which-th (modulo their number), so that ranks that share a mask take different CPUs.
  bool bind_to_one_cpu(int which) {
    if (!ok_ || CPU_COUNT(&saved_) == 0) return false;
    int skip = which % CPU_COUNT(&saved_);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &saved_) || skip-- > 0) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      return sched_setaffinity(0, sizeof(one), &one) == 0;
    }
    return false;
  }

 private:
  cpu_set_t saved_{};
  bool ok_ = false;
};

TEST_F(GradientSyncTest, AutomaticReducesOnTheCallerWhenBoundToOneCore) {
  auto params = make_params({64, 64});
  AffinityRestorer restore;
  ASSERT_TRUE(restore.bind_to_one_cpu(comm_.rank()));
  GradientSync sync(synced(params), stream_, GradientSyncOptions{});
  EXPECT_EQ(sync.reduce_on(), ReduceOn::caller);
}

TEST_F(GradientSyncTest, AutomaticReducesOnTheWorkerWithACoreToSpare) {
  if (cores_of_this_thread() < 2) {
    GTEST_SKIP() << "this rank may run on one CPU only (its affinity mask, e.g. mpirun "
                    "--bind-to core): no core to spare";
  }
  auto params = make_params({64, 64});
  GradientSync sync(synced(params), stream_, GradientSyncOptions{});
  EXPECT_EQ(sync.reduce_on(), ReduceOn::worker);
}

TEST_F(GradientSyncTest, UnusedParametersAreReducedAsTheirSlotsUnderPolicyZero) {
  const int n = comm_.size();
  const int r = comm_.rank();
  auto params = make_params({50, 60, 70});
  GradientSyncOptions options;
  options.first_bucket_bytes = 4;  // one parameter per bucket
  options.bucket_cap_bytes = 4;
  GradientSync sync(synced(params), stream_, options);
  fill_grads(params, r);
  // Rank 0 does not use p1 in this backward (its slot still holds its accumulated values).
  sync.begin_sync();
  sync.mark_ready(*params[2]);
  if (r != 0) sync.mark_ready(*params[1]);
  sync.mark_ready(*params[0]);
  // Ranks other than 0 launched every bucket already; let those reductions complete before
  // finish() so that nothing finish() does can race with them.
  if (r != 0) stream_.synchronize();
  const SyncReport report = sync.finish();
  EXPECT_EQ(report.unused_local, r == 0 ? 1u : 0u);
  EXPECT_EQ(report.ranks_with_unused, 1u);  // every rank learns that rank 0 had one
  if (r == 0) {
    EXPECT_EQ(report.unused_names, (std::vector<std::string>{"p1"}));
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    for (std::size_t i = 0; i < params[k]->grad.numel(); ++i) {
      ASSERT_EQ(params[k]->grad[i], summed_value(n, k, i));
    }
  }
}

TEST_F(GradientSyncTest, UnusedParametersRaiseOnEveryRankUnderPolicyError) {
  const int r = comm_.rank();
  auto params = make_params({50, 60, 70});
  GradientSyncOptions options;
  options.unused_parameters = UnusedParameterPolicy::error;
  GradientSync sync(synced(params), stream_, options);
  // Rank 0 leaves p1 without a gradient; the last rank (if another) p0 and p2.
  const int last = comm_.size() - 1;
  const bool last_skips = r == last && last != 0;
  sync.begin_sync();
  if (!last_skips) sync.mark_ready(*params[2]);
  if (r != 0) sync.mark_ready(*params[1]);
  if (!last_skips) sync.mark_ready(*params[0]);
  if (r != 0 && !last_skips) stream_.synchronize();  // as above
  try {
    sync.finish();
    ADD_FAILURE() << "no error on rank " << r;
  } catch (const std::runtime_error& e) {
    // Every rank's message names every rank's unused parameters.
    const std::string what = e.what();
    const std::string expected =
        last == 0 ? "1 rank(s) have parameters that received no gradient in this backward: rank 0: p1."
                  : "2 rank(s) have parameters that received no gradient in this backward: rank 0: p1; "
                    "rank " + std::to_string(last) + ": p0, p2.";
    EXPECT_NE(what.find(expected), std::string::npos) << what;
  }
  EXPECT_FALSE(sync.in_sync());
  // The stream and the ranks are still in step: a following synchronisation works.
  sync.begin_sync();
  for (auto it = params.rbegin(); it != params.rend(); ++it) sync.mark_ready(**it);
  EXPECT_NO_THROW(sync.finish());
}

TEST_F(GradientSyncTest, ReportingAParameterTwiceIsAnError) {
  auto params = make_params({4, 4});
  GradientSync sync(synced(params), stream_, {});
  sync.begin_sync();
  sync.mark_ready(*params[1]);
  EXPECT_THROW(sync.mark_ready(*params[1]), std::logic_error);
  sync.mark_ready(*params[0]);
  sync.finish();
  nn::Parameter stranger;
  stranger.name = "stranger";
  EXPECT_THROW(sync.index_of(stranger), std::invalid_argument);
}

TEST_F(GradientSyncTest, ExternalGradientsAreCopiedInAndOut) {
  const int n = comm_.size();
  const int r = comm_.rank();
  auto params = make_params({9, 4});
  std::vector<float> own0(9);
  std::vector<float> own1(4);
  for (std::size_t i = 0; i < 9; ++i) own0[i] = grad_value(r, 0, i);
  for (std::size_t i = 0; i < 4; ++i) own1[i] = grad_value(r, 1, i);
  GradientSync sync({{params[0].get(), own0}, {params[1].get(), own1}}, stream_, {});
  sync.begin_sync();
  sync.mark_ready(1);
  sync.mark_ready(0);
  sync.finish();
  for (std::size_t i = 0; i < 9; ++i) ASSERT_EQ(own0[i], summed_value(n, 0, i));
  for (std::size_t i = 0; i < 4; ++i) ASSERT_EQ(own1[i], summed_value(n, 1, i));
  sync.zero_grad();
  EXPECT_EQ(own0[3], 0.0f);
}

TEST_F(GradientSyncTest, ReplacedGradientTensorsAreMovedBackIn) {
  const int n = comm_.size();
  const int r = comm_.rank();
  auto params = make_params({8});
  GradientSync sync(synced(params), stream_, {});
  params[0]->grad = Tensor({8});  // someone replaced the view by an owning tensor
  for (std::size_t i = 0; i < 8; ++i) params[0]->grad[i] = grad_value(r, 0, i);
  sync.begin_sync();
  sync.mark_ready(*params[0]);
  sync.finish();
  EXPECT_EQ(params[0]->grad.data(), sync.gradient_slot(0).data());
  for (std::size_t i = 0; i < 8; ++i) ASSERT_EQ(params[0]->grad[i], summed_value(n, 0, i));
}

TEST_F(GradientSyncTest, RejectsDuplicatesAndBadOptions) {
  auto params = make_params({3});
  EXPECT_THROW(GradientSync({{params[0].get(), {}}, {params[0].get(), {}}}, stream_, {}),
               std::invalid_argument);
  GradientSyncOptions bad;
  bad.comm_dtype = DType::i32;
  EXPECT_THROW(GradientSync(synced(params), stream_, bad), std::invalid_argument);
  std::vector<float> wrong(2);
  EXPECT_THROW(GradientSync({{params[0].get(), wrong}}, stream_, {}), std::invalid_argument);
}

}  // namespace
}  // namespace mpitrain
