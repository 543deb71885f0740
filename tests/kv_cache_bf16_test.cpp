// The BF16 MLA latent cache. The kernels (vdpbf16ps scores and values on the bf16 rows) equal a
// double-precision sum of the same bf16 products over awkward widths, head counts and odd row
// counts; rounding to bf16 is bit-identical to the reference. Attention over the cache (decode
// kernels and SGEMM, host and scalar targets, 1-3 threads) equals the F32 path over the rounded
// rows up to the rounding of queries and probabilities. The CLI accepts `-ctk bf16 -ctv bf16`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "kernels/ref/fp16.h"
#include "runtime/kv_bf16.h"
#include "tests/cli_util.h"
#include "tests/mla_cache_util.h"

namespace zenmoe {
namespace {

using namespace mla_cache_test;

bool host_has_bf16() { return isa::host_supports(isa::IsaLevel::kAvx512Bf16); }

std::vector<bf16_t> random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<bf16_t> v(n);
  for (bf16_t& x : v) x = ref::fp32_to_bf16(nd(rng));
  return v;
}

TEST(KvCacheBf16, RoundingIsBitIdenticalToTheReference) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159265f, 65504.0f, 1e-40f, -1e-42f,
                          std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7F800001u),
                          std::bit_cast<float>(0x3F808000u), std::bit_cast<float>(0x3F818000u),  // ties: down, up
                          std::bit_cast<float>(0x3F808001u), std::bit_cast<float>(0x7F7FFFFFu)};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000; ++i) x.push_back(std::bit_cast<float>(bits(rng)));
  for (bool fast : {false, true}) {
    if (fast && !isa::host_supports(isa::IsaLevel::kAvx512)) continue;
    for (size_t n : {x.size(), size_t{1}, size_t{15}, size_t{17}}) {
      std::vector<bf16_t> got(n + 1, 0xABCD);
      kv_bf16_round_row(x.data(), got.data(), static_cast<int64_t>(n), fast);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], ref::fp32_to_bf16(x[i])) << "element " << i << (fast ? " avx512" : "");
      EXPECT_EQ(got[n], 0xABCD) << "wrote past the row";
    }
  }
}

// The kernels against double sums of the same bf16 products: only the f32 summation differs.
TEST(KvCacheBf16, KernelsMatchDoubleSumsOverAwkwardShapes) {
  if (!host_has_bf16()) GTEST_SKIP() << "the host has no AVX512-BF16";
  std::mt19937 rng(99);
  struct Shape {
    int64_t width, v_width, m, n_rows;
  };
  const Shape shapes[] = {{576, 512, 16, 37}, {576, 512, 12, 1}, {576, 512, 19, 64}, {40, 24, 3, 5},
                          {33, 7, 8, 2},      {64, 64, 1, 3},    {18, 18, 7, 9},     {576, 512, 24, 130},
                          // values tiles of 128 rows, a tile prefetched ahead: several tiles, odd rows
                          {576, 512, 16, 401}, {576, 512, 5, 300}};
  for (const Shape& sh : shapes) {
    const std::vector<bf16_t> rows = random_bf16(static_cast<size_t>(sh.width * sh.n_rows), rng);
    const std::vector<bf16_t> q = random_bf16(static_cast<size_t>(sh.width * sh.m), rng);
    const int64_t ld_s = sh.n_rows + 3, ld_p = (sh.n_rows + 1) / 2 * 2 + 2;
    std::vector<float> s(static_cast<size_t>(sh.m * ld_s), -7.0f);
    kv_bf16_scores_avx512(q.data(), sh.m, rows.data(), sh.width, sh.n_rows, s.data(), ld_s);
    for (int64_t h = 0; h < sh.m; ++h)
      for (int64_t j = 0; j < ld_s; ++j) {
        const float got = s[static_cast<size_t>(h * ld_s + j)];
        if (j >= sh.n_rows) {
          ASSERT_EQ(got, -7.0f) << "score written past the rows";
          continue;
        }
        double want = 0, mag = 0;
        for (int64_t k = 0; k < sh.width; ++k) {
          const double t = static_cast<double>(ref::bf16_to_fp32(q[static_cast<size_t>(h * sh.width + k)])) *
                           ref::bf16_to_fp32(rows[static_cast<size_t>(j * sh.width + k)]);
          want += t;
          mag += std::fabs(t);
        }
        ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30) << "scores " << sh.width << "x" << sh.n_rows << " head " << h << " row " << j;
      }
    // Probabilities in [0, 1); entries past the rows are NaN, which the pairs must not pick up.
    std::vector<bf16_t> p(static_cast<size_t>(sh.m * ld_p));
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    for (int64_t h = 0; h < sh.m; ++h)
      for (int64_t j = 0; j < ld_p; ++j) p[static_cast<size_t>(h * ld_p + j)] = j < sh.n_rows ? ref::fp32_to_bf16(ud(rng)) : 0x7FC0;
    std::vector<uint32_t> pairs(static_cast<size_t>((sh.n_rows + 1) / 2 * sh.m), 0xFFFFFFFFu);
    kv_bf16_pairs(p.data(), ld_p, sh.m, sh.n_rows, pairs.data());
    for (int64_t h = 0; h < sh.m; ++h)
      for (int64_t j = 0; j < sh.n_rows; ++j) {
        const uint32_t w = pairs[static_cast<size_t>((j / 2) * sh.m + h)];
        ASSERT_EQ(j % 2 ? w >> 16 : w & 0xFFFFu, p[static_cast<size_t>(h * ld_p + j)]) << "pairs, head " << h << " row " << j;
        if (j + 1 == sh.n_rows && j % 2 == 0) {
          ASSERT_EQ(w >> 16, 0u) << "the pair past the last row is not zero";
        }
      }
    std::vector<float> y(static_cast<size_t>(sh.m * sh.v_width) + 5, -9.0f);
    kv_bf16_values_avx512(pairs.data(), sh.m, rows.data(), sh.width, sh.n_rows, sh.v_width, y.data());
    for (int64_t h = 0; h < sh.m; ++h)
      for (int64_t i = 0; i < sh.v_width; ++i) {
        double want = 0, mag = 0;
        for (int64_t j = 0; j < sh.n_rows; ++j) {
          const double t = static_cast<double>(ref::bf16_to_fp32(p[static_cast<size_t>(h * ld_p + j)])) *
                           ref::bf16_to_fp32(rows[static_cast<size_t>(j * sh.width + i)]);
          want += t;
          mag += std::fabs(t);
        }
        ASSERT_NEAR(y[static_cast<size_t>(h * sh.v_width + i)], want, 1e-6 * mag + 1e-30)
            << "values " << sh.width << "x" << sh.n_rows << " head " << h << " column " << i;
      }
    for (size_t i = static_cast<size_t>(sh.m * sh.v_width); i < y.size(); ++i) ASSERT_EQ(y[i], -9.0f) << "wrote past y";
  }
}

// Stores batches into a 16-bit cache (BF16 or F16) and into an F32 cache given the same rows
// rounded, and compares the outputs. BF16 with AVX512-BF16 runs the vdpbf16ps kernels, which
// round queries and probabilities too: returns the largest difference. Otherwise the arithmetic
// is F32 on the same numbers (the F16 glue kernels, or SGEMM on the rows widened as they were
// stored) and must agree to summation order.
double check_target(isa::Target target, int nth, KvCacheType kv = KvCacheType::BF16) {
  ir::Node node;
  const ir::Graph g = attention_graph(&node);
  auto half = MlaOp::create(node, g, target, kv);
  auto f32 = MlaOp::create(node, g, target, KvCacheType::F32);
  EXPECT_TRUE(half.has_value() && f32.has_value());
  if (!half || !f32) return 1e30;
  const bool bf16 = kv == KvCacheType::BF16;
  const bool rounds = bf16 && target.level >= isa::IsaLevel::kAvx512Bf16;
  Cache ch(bf16 ? GgmlType::BF16 : GgmlType::F16), cf(GgmlType::F32);
  std::mt19937 rng(4321u + static_cast<unsigned>(nth));
  int64_t p0 = 0;
  double worst = 0.0;
  for (int64_t T : kBatchSizes) {
    EXPECT_LE(p0 + T, kCtx);
    Batch b(p0, T, rng);
    const std::vector<float> yh = attend(**half, b, ch, nth);
    // store() writes the reference rounding; the F32 cache then gets the rounded rows.
    const auto* cached = reinterpret_cast<const uint16_t*>(ch.bytes.data());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < kW; ++i) {
        float& x = i < kR ? b.c[static_cast<size_t>(t * kR + i)] : b.k_pe[static_cast<size_t>(t * kRope + i - kR)];
        const uint16_t want = bf16 ? ref::fp32_to_bf16(x) : ref::fp32_to_fp16(x);
        EXPECT_EQ(cached[(p0 + t) * kW + i], want) << "position " << p0 + t << " element " << i;
        x = bf16 ? ref::bf16_to_fp32(want) : ref::fp16_to_fp32(want);
      }
    }
    const std::vector<float> yf = attend(**f32, b, cf, nth);
    const double d = max_abs_diff(yh, yf);
    if (!rounds) {
      EXPECT_LE(d, 2e-5) << kv_cache_type_name(kv) << " batch at " << p0;
    } else {
      worst = std::max(worst, d);
    }
    p0 += T;
  }
  return worst;
}

TEST(KvCacheBf16, AttentionMatchesF32OverTheRoundedRows) {
  const isa::Target host{isa::host_level(), isa::host_tuning()};
  for (int nth : {1, 3}) {
    const double d = check_target(host, nth);
    // Queries and probabilities rounded to bf16 (relative 2^-9 each). The outputs are averages of
    // the visible N(0,1) rows: at the first positions of a prompt, one or a few rows with |v| up
    // to ~4, so up to ~8e-3 (measured 9.7e-3); past hundreds of rows (decode) about 1e-3.
    std::printf("[kv bf16] %s, %d threads: max |y_bf16 - y_f32| = %.3e\n",
                isa::level_name(host.level), nth, d);
    EXPECT_LE(d, 2e-2);
    if (host_has_bf16()) {
      EXPECT_GT(d, 0.0);  // the kernels really round
    }
  }
}

TEST(KvCacheBf16, ScalarTargetWidensForSgemm) { EXPECT_EQ(check_target(isa::Target{}, 2), 0.0); }

// F16 runs F32 arithmetic on the same numbers everywhere: the glue kernels, or, without them,
// SGEMM on a copy of the rows widened as they are stored.
TEST(KvCacheF16, AttentionMatchesF32OverTheRoundedRows) {
  for (const isa::Target t : {isa::Target{isa::host_level(), isa::host_tuning()}, isa::Target{}})
    for (int nth : {1, 3}) EXPECT_EQ(check_target(t, nth, KvCacheType::F16), 0.0) << isa::level_name(t.level);
}

namespace fs = std::filesystem;

TEST(KvCacheBf16Cli, RunsWithBf16Cache) {
  const fs::path dir = fs::temp_directory_path() / ("zenmoe_kvbf16_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string model = std::string("'") + ZENMOE_ORACLE_DIR + "/tiny-q4ks.gguf'";
  const auto r = testing_cli::run_zenmoe(
      "run -m " + model + " -p 'The quick brown fox' -n 8 --temp 0 -c 256 -ctk bf16 -ctv bf16 -v", dir);
  fs::remove_all(dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  // tiny-q4ks: 4 layers of 576-element rows, 256 positions at 2 bytes each.
  EXPECT_NE(r.err.find("KV cache: " + std::to_string(4 * 256 * 576 * 2) + " bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("as bf16"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace zenmoe
