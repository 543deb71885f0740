// Split decode attention: one token's attention over a long cache, split by cache positions
// across threads (each share's softmax and values, then a merge per head), equals the attention
// split by heads for every cache type, up to summation order (and, for BF16, the rounding of
// each share's probabilities). Short contexts, single threads and prompt batches do not split.
// With more threads than vectors of 16 heads, shorter contexts split each vector's positions.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "codegen/isa.h"
#include "tests/mla_cache_util.h"

namespace zenmoe {
namespace {

using namespace mla_cache_test;

// The split run of a one-token batch, stored first as attend() does.
std::vector<float> attend_split(const MlaOp& op, Batch& b, Cache& cache, int nth) {
  std::vector<float> y(static_cast<size_t>(kR * b.heads), std::nanf(""));
  Tensor ty;
  Batch::wrap(ty, y.data(), {kR, b.heads, 1});
  Tensor* in[] = {&b.tq_lat, &b.tq_pe, &b.tc, &b.tk_pe, &cache.t, &b.tpos};
  op.store(in);
  EXPECT_TRUE(op.prepare_split(1, nth, b.tpos));
  std::vector<AttentionScratch> scratch(static_cast<size_t>(nth));
  for (int tid = 0; tid < nth; ++tid) op.run_part(tid, in, scratch[static_cast<size_t>(tid)]);
  for (int tid = 0; tid < nth; ++tid) op.merge(tid, nth, ty);
  return y;
}

struct CacheCase {
  KvCacheType kv;
  GgmlType type;
  double bound;
};

TEST(MlaSplit, EqualsTheHeadSplitForEveryCacheType) {
  const isa::Target host{isa::host_level(), isa::host_tuning()};
  if (host.level < isa::IsaLevel::kAvx512) GTEST_SKIP() << "the decode kernels need AVX-512";
  // Outputs are averages of N(0,1) values (|y| < 4); measured differences about 4e-7 (summation
  // order). BF16: each share rounds its own probabilities (normalised by its own sum) to bf16,
  // relative 2^-9 each; measured up to about 1e-3.
  std::vector<CacheCase> cases = {{KvCacheType::F32, GgmlType::F32, 2e-6},
                                  {KvCacheType::F16, GgmlType::F16, 2e-6},
                                  {KvCacheType::Q8_0, GgmlType::Q8_0, 2e-6}};
  if (host.level >= isa::IsaLevel::kAvx512Bf16) cases.push_back({KvCacheType::BF16, GgmlType::BF16, 3e-3});
  ir::Node node;
  const ir::Graph g = attention_graph(&node);
  for (const CacheCase& cc : cases) {
    auto op = MlaOp::create(node, g, host, cc.kv);
    ASSERT_TRUE(op.has_value()) << op.error();
    Cache cache(cc.type);
    std::mt19937 rng(77);
    int64_t p0 = 0;
    for (; p0 + 64 <= kCtx - 8; p0 += 64) {
      Batch b(p0, 64, rng);
      attend(**op, b, cache, 2);
    }
    for (int nth : {2, 3, 4}) {
      for (int step = 0; step < 2; ++step, ++p0) {  // an odd and an even context length
        ASSERT_LT(p0, kCtx);
        Batch b(p0, 1, rng);
        const std::vector<float> by_heads = attend(**op, b, cache, nth);
        const std::vector<float> by_rows = attend_split(**op, b, cache, nth);
        const double d = max_abs_diff(by_heads, by_rows);
        std::printf("[mla split] %s cache, %d threads, %lld positions: max difference %.3e\n",
                    kv_cache_type_name(cc.kv), nth, static_cast<long long>(p0 + 1), d);
        EXPECT_LE(d, cc.bound) << kv_cache_type_name(cc.kv) << ", " << nth << " threads";
      }
    }
  }
}

// 40 heads (three vectors of 16, the last partly used) on 6 and 7 threads: two shares of
// positions per vector from 2 * kMlaSplitMinRows positions (the seventh thread idle), each
// thread all positions for all heads below that; on 4 threads no share of its own until
// 4 * kMlaSplitMinRows positions, where every thread takes all heads.
TEST(MlaSplit, VectorsOfHeadsSplitByPositionsWhenThreadsOutnumberThem) {
  const isa::Target host{isa::host_level(), isa::host_tuning()};
  if (host.level < isa::IsaLevel::kAvx512) GTEST_SKIP() << "the decode kernels need AVX-512";
  constexpr int64_t kHeads40 = 40;
  ir::Node node;
  const ir::Graph g = attention_graph(&node, kHeads40);
  auto op = MlaOp::create(node, g, host, KvCacheType::F16, 6);
  ASSERT_TRUE(op.has_value()) << op.error();
  Cache cache(GgmlType::F16);
  std::mt19937 rng(91);
  int64_t p0 = 0;
  for (; p0 + 64 <= 2 * kMlaSplitMinRows - 1; p0 += 64) {
    Batch b(p0, 64, rng, kHeads40);
    attend(**op, b, cache, 2);
  }
  for (; p0 < 2 * kMlaSplitMinRows - 1; ++p0) {
    Batch b(p0, 1, rng, kHeads40);
    attend(**op, b, cache, 2);
  }
  EXPECT_FALSE((*op)->prepare_split(1, 6, Batch(p0 - 1, 1, rng, kHeads40).tpos)) << "one share per vector";
  for (int step = 0; step < 3; ++step, ++p0) {  // 2 * kMlaSplitMinRows positions and the two after
    for (int nth : {6, 7}) {
      Batch b(p0, 1, rng, kHeads40);
      const std::vector<float> by_heads = attend(**op, b, cache, nth);
      const std::vector<float> by_rows = attend_split(**op, b, cache, nth);
      const double d = max_abs_diff(by_heads, by_rows);
      std::printf("[mla split] 40 heads, %d threads, %lld positions: max difference %.3e\n", nth,
                  static_cast<long long>(p0 + 1), d);
      EXPECT_LE(d, 2e-6) << nth << " threads";
    }
    EXPECT_FALSE((*op)->prepare_split(1, 4, Batch(p0, 1, rng, kHeads40).tpos)) << "4 threads, 3 vectors";
  }
  EXPECT_TRUE((*op)->prepare_split(1, 4, Batch(4 * kMlaSplitMinRows - 1, 1, rng, kHeads40).tpos));
}

// 64 heads on 2 threads fill both threads' vectors when split by heads: positions split only
// from kMlaSplitMinRowsWhole a thread; on 3 threads (22 heads each, vectors part idle) and on 8
// (8 heads each) from kMlaSplitMinRows.
TEST(MlaSplit, WholeVectorsOfHeadsSplitOnlyOverLongCaches) {
  const isa::Target host{isa::host_level(), isa::host_tuning()};
  if (host.level < isa::IsaLevel::kAvx512) GTEST_SKIP() << "the decode kernels need AVX-512";
  constexpr int64_t kHeads64 = 64;
  ir::Node node;
  const ir::Graph g = attention_graph(&node, kHeads64);
  auto op = MlaOp::create(node, g, host, KvCacheType::F16, 2);
  ASSERT_TRUE(op.has_value()) << op.error();
  std::mt19937 rng(5);
  auto splits = [&](int64_t positions, int nth) {
    return (*op)->prepare_split(1, nth, Batch(positions - 1, 1, rng, kHeads64).tpos);
  };
  EXPECT_FALSE(splits(2 * kMlaSplitMinRowsWhole - 1, 2));
  EXPECT_TRUE(splits(2 * kMlaSplitMinRowsWhole, 2));
  EXPECT_EQ((*op)->split_shares(), 2);
  EXPECT_FALSE(splits(3 * kMlaSplitMinRows - 1, 3));
  EXPECT_TRUE(splits(3 * kMlaSplitMinRows, 3));
  EXPECT_EQ((*op)->split_shares(), 3);
  EXPECT_FALSE(splits(2 * kMlaSplitMinRows - 1, 8)) << "one share per vector";
  EXPECT_TRUE(splits(2 * kMlaSplitMinRows, 8)) << "two shares per vector";
  EXPECT_EQ((*op)->split_shares(), 2);
}

TEST(MlaSplit, OnlyLongSingleTokenBatchesSplit) {
  const isa::Target host{isa::host_level(), isa::host_tuning()};
  ir::Node node;
  const ir::Graph g = attention_graph(&node);
  auto op = MlaOp::create(node, g, host, KvCacheType::F32);
  ASSERT_TRUE(op.has_value()) << op.error();
  std::mt19937 rng(3);
  const bool kernels = host.level >= isa::IsaLevel::kAvx512;
  EXPECT_EQ((*op)->prepare_split(1, 2, Batch(2 * kMlaSplitMinRows - 1, 1, rng).tpos), kernels);
  EXPECT_FALSE((*op)->prepare_split(1, 2, Batch(2 * kMlaSplitMinRows - 2, 1, rng).tpos)) << "too few positions";
  EXPECT_EQ((*op)->prepare_split(1, 2, Batch(2 * 16 - 1, 1, rng).tpos, 16), kernels) << "shares of 16 asked for";
  EXPECT_FALSE((*op)->prepare_split(1, 1, Batch(400, 1, rng).tpos)) << "one thread";
  EXPECT_FALSE((*op)->prepare_split(2, 2, Batch(400, 2, rng).tpos)) << "two tokens";
  auto scalar = MlaOp::create(node, g, isa::Target{}, KvCacheType::F32);
  ASSERT_TRUE(scalar.has_value());
  EXPECT_FALSE((*scalar)->prepare_split(1, 2, Batch(400, 1, rng).tpos)) << "no decode kernels";
}

}  // namespace
}  // namespace zenmoe
