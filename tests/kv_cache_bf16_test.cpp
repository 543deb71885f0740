// The BF16 and F16 MLA latent caches: rounding to bf16 is bit-identical to the reference, and
// attention over either cache (decode kernels and SGEMM, host and scalar targets, 1-3 threads)
// equals the F32 path over the rounded rows (with bf16 products on AVX512_BF16 targets, within
// the rounding of the probabilities). The CLI accepts `-ctk bf16 -ctv bf16`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
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

// Stores batches into a 16-bit cache (BF16 or F16) and into an F32 cache given the same rows
// rounded, and returns the largest difference of the outputs. The arithmetic is F32 on the same
// numbers (the decode kernels widen the rows exactly; without AVX-512, SGEMM on the rows widened
// as they were stored), so the outputs differ only by summation order: prompt batches of the
// F32 cache run SGEMM, those of a 16-bit cache the decode kernels token by token. A BF16 cache
// on an AVX512_BF16 target scheduled for Zen 4 or 5 takes bf16 pair products
// (glue_attn_bf16_dot, MlaOp::decode_bf16_pairs): both caches then get
// queries already rounded to bf16, and `allowed` grows by the rounding of the probabilities to
// bf16, at most 2^-8 of the largest row element.
double check_target(isa::Target target, int nth, KvCacheType kv = KvCacheType::BF16, double* allowed = nullptr) {
  ir::Node node;
  const ir::Graph g = attention_graph(&node);
  auto half = MlaOp::create(node, g, target, kv);
  auto f32 = MlaOp::create(node, g, target, KvCacheType::F32);
  EXPECT_TRUE(half.has_value() && f32.has_value());
  if (!half || !f32) return 1e30;
  const bool bf16 = kv == KvCacheType::BF16;
  Cache ch(bf16 ? GgmlType::BF16 : GgmlType::F16), cf(GgmlType::F32);
  std::mt19937 rng(4321u + static_cast<unsigned>(nth));
  const bool dot = (*half)->decode_bf16_pairs();
  EXPECT_EQ(dot, bf16 && target.level >= isa::IsaLevel::kAvx512Bf16 && !(*half)->decode_amx() &&
                     (target.tuning == isa::Tuning::kZen4 || target.tuning == isa::Tuning::kZen5));
  int64_t p0 = 0;
  double worst = 0.0, largest = 0.0;
  for (int64_t T : kBatchSizes) {
    EXPECT_LE(p0 + T, kCtx);
    Batch b(p0, T, rng);
    if (dot)
      for (std::vector<float>* q : {&b.q_lat, &b.q_pe})
        for (float& x : *q) x = ref::bf16_to_fp32(ref::fp32_to_bf16(x));
    const std::vector<float> yh = attend(**half, b, ch, nth);
    // store() writes the reference rounding; the F32 cache then gets the rounded rows.
    const auto* cached = reinterpret_cast<const uint16_t*>(ch.bytes.data());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < kW; ++i) {
        float& x = i < kR ? b.c[static_cast<size_t>(t * kR + i)] : b.k_pe[static_cast<size_t>(t * kRope + i - kR)];
        const uint16_t want = bf16 ? ref::fp32_to_bf16(x) : ref::fp32_to_fp16(x);
        EXPECT_EQ(cached[(p0 + t) * kW + i], want) << "position " << p0 + t << " element " << i;
        x = bf16 ? ref::bf16_to_fp32(want) : ref::fp16_to_fp32(want);
        largest = std::max(largest, static_cast<double>(std::fabs(x)));
      }
    }
    const std::vector<float> yf = attend(**f32, b, cf, nth);
    worst = std::max(worst, max_abs_diff(yh, yf));
    p0 += T;
  }
  if (allowed != nullptr) *allowed = 2e-5 + (dot ? std::ldexp(largest, -8) : 0.0);
  return worst;
}

// The BF16 cache: F32 arithmetic on the same numbers, or bf16 pair products on AVX512_BF16
// targets scheduled for Zen 4 or 5.
TEST(KvCacheBf16, AttentionMatchesF32OverTheRoundedRows) {
  // The host as it is, the host scheduled for Zen 5 (the bf16 dot form wherever AVX512_BF16
  // is there), and the scalar target.
  for (const isa::Target t : {isa::Target{isa::host_level(), isa::host_tuning()},
                              isa::Target{isa::host_level(), isa::Tuning::kZen5}, isa::Target{}})
    for (int nth : {1, 3}) {
      double allowed = 0.0;
      const double worst = check_target(t, nth, KvCacheType::BF16, &allowed);
      EXPECT_LE(worst, allowed) << isa::level_name(t.level);
      // The bf16 products still round: not the F32 figures bit for bit.
      if (t.level >= isa::IsaLevel::kAvx512Bf16 && t.tuning != isa::Tuning::kGeneric) {
        EXPECT_GT(worst, 0.0);
      }
    }
}

TEST(KvCacheF16, AttentionMatchesF32OverTheRoundedRows) {
  for (const isa::Target t : {isa::Target{isa::host_level(), isa::host_tuning()}, isa::Target{}})
    for (int nth : {1, 3}) EXPECT_LE(check_target(t, nth, KvCacheType::F16), 2e-5) << isa::level_name(t.level);
}

// Without AVX-512 both 16-bit caches keep F32 copies of their rows for SGEMM: the same products
// as the F32 cache, bit for bit.
TEST(KvCacheBf16, ScalarTargetWidensForSgemm) {
  EXPECT_EQ(check_target(isa::Target{}, 2), 0.0);
  EXPECT_EQ(check_target(isa::Target{}, 2, KvCacheType::F16), 0.0);
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
