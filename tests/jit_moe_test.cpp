// Fused MoE expert kernels: gate + up + SwiGLU + Q8_K quantisation in one call, and the down
// projection that accumulates alpha * W_down h into the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "codegen/registry.h"
#include "codegen/x64/generators.h"
#include "codegen/x64/swiglu_q8k.h"
#include "jit_gemv_tester.h"
#include "kernels/pack.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quant.h"

namespace zenmoe {
namespace {

using isa::IsaLevel;

std::vector<IsaLevel> fused_levels() {
  std::vector<IsaLevel> out = {IsaLevel::kScalar};
  for (IsaLevel l : isa::host_levels())
    if (l >= IsaLevel::kAvx512 && l == isa::kernel_level(l)) out.push_back(l);  // levels kernels are made for
  return out;
}

std::vector<float> run_gemv(const Kernel& k, const uint8_t* w, const void* x, int64_t rows) {
  std::vector<float> y(static_cast<size_t>(rows));
  GemvCall c;
  c.w = w;
  c.x = x;
  c.y = y.data();
  c.r0 = 0;
  c.r1 = rows;
  k(c);
  return y;
}

class GateUp : public ::testing::TestWithParam<IsaLevel> {};

// The fused kernel must equal, bit for bit, the plain GEMV of the same ISA over the same
// interleaved rows followed by the epilogue's scalar model (swiglu_approx, itself checked
// against the reference SwiGLU below) and the reference Q8_K quantiser; the plain GEMV's gate
// rows must equal, bit for bit, the plain GEMV over the gate matrix alone (itself checked
// against the reference vec_dot in jit_gemv_test).
TEST_P(GateUp, EqualsGemvThenSwigluThenQuantise) {
  const IsaLevel level = GetParam();
  // 1, 3 and 10 blocks of outputs: with 2 or 4 streams, blocks are walked in runs (one run
  // per stream, several blocks long at 10) and the leftover blocks split between the streams.
  for (int64_t ffn : {256, 768, 2560})
    for (int64_t k : {256, 2048, 7168}) {
      if (ffn == 2560 && k == 7168) continue;
      SCOPED_TRACE("ffn " + std::to_string(ffn) + " K " + std::to_string(k));
      std::mt19937 rng(static_cast<uint32_t>(ffn + k));
      const size_t bytes = static_cast<size_t>(ffn * row_bytes(GgmlType::Q4_K, k));
      std::vector<uint8_t> gate(bytes), up(bytes);
      testing::fill_q4k(testing::Data::kRandom, rng, ffn * k / 256, gate.data());
      testing::fill_q4k(testing::Data::kRandom, rng, ffn * k / 256, up.data());
      std::vector<float> xf(static_cast<size_t>(k));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (auto& v : xf) v = u(rng);
      std::vector<uint8_t> x(static_cast<size_t>(row_bytes(GgmlType::Q8_K, k)));
      ref::quantize_row(GgmlType::Q8_K, xf.data(), x.data(), k);

      Expected<PackedWeights> gu = pack_gate_up(GgmlType::Q4_K, 8, gate.data(), up.data(), bytes, ffn, k);
      ASSERT_TRUE(gu.has_value()) << gu.error();
      Expected<PackedWeights> g = pack_weights(GgmlType::Q4_K, 8, gate.data(), bytes, ffn, k);
      ASSERT_TRUE(g.has_value());
      const isa::Target t{level, isa::Tuning::kGeneric};
      auto plain = global_registry().get(default_gemv_desc(GgmlType::Q4_K, static_cast<int32_t>(k), t));
      ASSERT_TRUE(plain.has_value()) << plain.error();

      const std::vector<float> y = run_gemv(**plain, gu->data.get(), x.data(), 2 * ffn);
      const std::vector<float> yg = run_gemv(**plain, g->data.get(), x.data(), ffn);
      std::vector<float> gv(static_cast<size_t>(ffn)), uv(static_cast<size_t>(ffn)), h(static_cast<size_t>(ffn));
      for (int64_t r = 0; r < ffn; ++r) {
        ASSERT_EQ(std::memcmp(&y[2 * r], &yg[r], 4), 0) << "gate row " << r;
        gv[r] = y[2 * r];
        uv[r] = y[2 * r + 1];
      }
      for (int64_t r = 0; r < ffn; ++r) h[r] = x64::swiglu_approx(gv[r], uv[r]);
      std::vector<uint8_t> want(static_cast<size_t>(row_bytes(GgmlType::Q8_K, ffn)));
      ref::quantize_row(GgmlType::Q8_K, h.data(), want.data(), ffn);

      // Every stream count the ISA has, and either prefetch instruction, gives the same bits
      // (each stream sums its groups in the same order).
      const std::vector<int> streams = level >= IsaLevel::kAvx512 ? std::vector<int>{1, 2, 4} : std::vector<int>{1};
      for (int ns : streams)
      for (PrefetchHint hint : {PrefetchHint::kT0, PrefetchHint::kNta})
      for (int64_t r0 : {int64_t{0}, int64_t{256}})
      for (int64_t r1 : {ffn, ffn - 256}) {
        if (r0 >= r1) continue;
        SCOPED_TRACE("streams " + std::to_string(ns) + " hint " + std::to_string(static_cast<int>(hint)) +
                     " rows " + std::to_string(r0) + ".." + std::to_string(r1));
        KernelDesc fd = default_gemv_desc(GgmlType::Q4_K, static_cast<int32_t>(k), t, KernelOp::kGateUpSwiglu);
        fd.streams = static_cast<uint8_t>(ns);
        if (fd.prefetch > 0) fd.prefetch_hint = hint;
        auto fused = global_registry().get(fd);
        ASSERT_TRUE(fused.has_value()) << fused.error();
        EXPECT_EQ(canonical_name((*fused)->desc()),
                  std::string("gateup_q4k_q8k_q8k_8r__") + isa::level_name(level) + "_generic");
        std::vector<uint8_t> out(want.size(), 0xAB);
        GemvCall c;
        c.w = gu->data.get();
        c.x = x.data();
        c.r0 = r0;
        c.r1 = r1;
        c.q8_out = out.data();
        (**fused)(c);
        const size_t skip = static_cast<size_t>(r0 / 256) * sizeof(BlockQ8_K);
        const size_t end = static_cast<size_t>(r1 / 256) * sizeof(BlockQ8_K);
        for (size_t i = 0; i < out.size(); ++i) {
          if (i < skip || i >= end) {
            ASSERT_EQ(out[i], 0xAB) << "wrote outside [r0, r1)";
          }
        }
        ASSERT_EQ(std::memcmp(out.data() + skip, want.data() + skip, end - skip), 0);
      }
    }
}

// Several tokens in one GemmCall of the fused kernel (the few-token passes on AVX-512 VNNI,
// one fused GEMV per token below it): each token's output row, found through y_rows, holds
// byte for byte what the fused GEMV writes for that token alone, and nothing else is written.
TEST_P(GateUp, SeveralTokensEqualEachAlone) {
  const IsaLevel level = GetParam();
  for (int64_t k : {256, 2048})
    for (int64_t n : {2, 3, 4, 5, 7}) {
      const int64_t ffn = 768;
      SCOPED_TRACE("K " + std::to_string(k) + " tokens " + std::to_string(n));
      std::mt19937 rng(static_cast<uint32_t>(k + 31 * n));
      const size_t bytes = static_cast<size_t>(ffn * row_bytes(GgmlType::Q4_K, k));
      std::vector<uint8_t> gate(bytes), up(bytes);
      testing::fill_q4k(testing::Data::kRandom, rng, ffn * k / 256, gate.data());
      testing::fill_q4k(testing::Data::kRandom, rng, ffn * k / 256, up.data());
      Expected<PackedWeights> gu = pack_gate_up(GgmlType::Q4_K, 8, gate.data(), up.data(), bytes, ffn, k);
      ASSERT_TRUE(gu.has_value()) << gu.error();
      const int64_t xs = row_bytes(GgmlType::Q8_K, k), qs = row_bytes(GgmlType::Q8_K, ffn);
      std::vector<uint8_t> x(static_cast<size_t>((n + 1) * xs));
      std::vector<float> xf(static_cast<size_t>(k));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (int64_t i = 0; i <= n; ++i) {
        for (auto& v : xf) v = u(rng) * float(1 + i);
        ref::quantize_row(GgmlType::Q8_K, xf.data(), x.data() + i * xs, k);
      }
      auto fused = global_registry().get(
          default_gemv_desc(GgmlType::Q4_K, static_cast<int32_t>(k), {level, isa::Tuning::kGeneric}, KernelOp::kGateUpSwiglu));
      ASSERT_TRUE(fused.has_value()) << fused.error();
      // Token t reads activation row n - t and writes output row t + 1 of n + 2.
      std::vector<int32_t> xi(static_cast<size_t>(n)), yi(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) xi[t] = static_cast<int32_t>(n - t), yi[t] = static_cast<int32_t>(t + 1);
      for (auto [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{0, ffn}, {256, 512}}) {
        std::vector<uint8_t> got(static_cast<size_t>((n + 2) * qs), 0xAB), want(got);
        GemmCall c;
        c.w = gu->data.get();
        c.x = x.data();
        c.x_stride = xs;
        c.x_rows = xi.data();
        c.y_rows = yi.data();
        c.q8_out = got.data();
        c.q8_stride = qs;
        c.r0 = r0;
        c.r1 = r1;
        c.n = n;
        (*fused)->gemm(c);
        for (int64_t t = 0; t < n; ++t) {
          GemvCall g;
          g.w = gu->data.get();
          g.x = x.data() + xi[t] * xs;
          g.r0 = r0;
          g.r1 = r1;
          g.q8_out = want.data() + yi[t] * qs;
          (**fused)(g);
        }
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << "rows " << r0 << ".." << r1;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Host, GateUp, ::testing::ValuesIn(fused_levels()),
                         [](const ::testing::TestParamInfo<IsaLevel>& i) { return std::string(isa::level_name(i.param)); });

// The epilogue's SwiGLU against the reference (g / (1 + exp(-g))) * u over the whole range a
// gate can take: within 4 ulp-ish relative error, identical at the saturated ends.
TEST(GateUpEpilogue, SwigluApproxIsCloseToReference) {
  std::vector<float> gs = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, 0.5f, -0.5f, 1.0f, -1.0f, 20.0f, -20.0f,
                           87.0f, -87.0f, 88.7f, -88.7f, 89.0f, -89.0f, 99.0f, -99.0f, 100.0f, -100.0f,
                           150.0f, -150.0f, 1e10f, -1e10f, 3e38f, -3e38f};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  for (int i = 0; i < 20000; ++i) gs.push_back(u(rng));
  for (float g : gs)
    for (float up : {1.0f, -0.75f, 3e-3f}) {
      float want;
      ref::swiglu(&g, &up, &want, 1);
      const float got = x64::swiglu_approx(g, up);
      ASSERT_LE(std::abs(double(got) - double(want)), 5e-7 * std::abs(double(want)) + 1e-40)
          << "g " << g << " up " << up << ": " << got << " vs " << want;
    }
}

// The generated epilogue against its scalar model on adversarial blocks: ties in |h| of both
// signs (the first one sets the sign of d), all zeros, one nonzero, huge and tiny values.
std::vector<std::vector<float>> epilogue_blocks() {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::vector<std::vector<float>> blocks;
  auto random = [&](float scale) {
    std::vector<float> b(512);
    for (auto& v : b) v = u(rng) * scale;
    return b;
  };
  for (float scale : {1.0f, 1e-3f, 1e3f, 1e-20f, 1e15f}) blocks.push_back(random(scale));
  blocks.push_back(std::vector<float>(512, 0.0f));  // all zero: a zero block
  std::vector<float> one(512, 0.0f);
  one[2 * 77] = 3.0f;  // a single nonzero output
  one[2 * 77 + 1] = -2.0f;
  blocks.push_back(one);
  // Ties in |h|: equal gates with ups of opposite sign; the first one decides the sign of d.
  for (int first_sign : {1, -1}) {
    std::vector<float> tie = random(0.1f);
    tie[2 * 10] = tie[2 * 200] = 5.0f;
    tie[2 * 10 + 1] = 4.0f * float(first_sign);
    tie[2 * 200 + 1] = -4.0f * float(first_sign);
    blocks.push_back(tie);
  }
  std::vector<float> sat = random(1.0f);  // saturated silu at both ends
  for (int r = 0; r < 256; r += 3) sat[2 * r] = (r % 2 ? 1.0f : -1.0f) * (90.0f + float(r));
  blocks.push_back(sat);
  return blocks;
}

TEST(GateUpEpilogue, GeneratedEqualsModelBitForBit) {
  const bool avx512 = isa::host_supports(IsaLevel::kAvx512);
  for (const auto& gu : epilogue_blocks()) {
    std::vector<uint8_t> want(sizeof(BlockQ8_K)), got(sizeof(BlockQ8_K), 0xAB);
    x64::swiglu_quantize_q8k(gu.data(), want.data());
    alignas(64) float buf[512];
    std::copy(gu.begin(), gu.end(), buf);
    Status st = x64::run_generated_swiglu_quantize_q8k(buf, got.data());
    ASSERT_EQ(st.is_ok(), avx512) << st.message();
    if (!avx512) continue;  // hosts without AVX-512 only run the scalar model
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "block of " << gu[0];
    for (int r = 0; r < 256; ++r) ASSERT_EQ(buf[r], x64::swiglu_approx(gu[2 * r], gu[2 * r + 1])) << r;
  }
}

TEST(GateUpDesc, RequiresQ8KOutputAndQ4K) {
  KernelDesc d = default_gemv_desc(GgmlType::Q4_K, 2048, {IsaLevel::kScalar, isa::Tuning::kGeneric},
                                   KernelOp::kGateUpSwiglu);
  EXPECT_TRUE(validate(d).is_ok());
  d.out = OutType::kF32;
  EXPECT_FALSE(validate(d).is_ok());
  d = default_gemv_desc(GgmlType::Q8_0, 2048, {IsaLevel::kScalar, isa::Tuning::kGeneric}, KernelOp::kGateUpSwiglu);
  EXPECT_FALSE(validate(d).is_ok());
  std::vector<uint8_t> w(144);
  EXPECT_FALSE(pack_gate_up(GgmlType::Q4_K, 8, w.data(), w.data(), w.size(), 2, 256).has_value());
}

// The down projection of an expert: y += w_e * W_down h, accumulated over experts.
TEST(MoeDown, AccumulatesRouterWeightedExperts) {
  for (IsaLevel level : fused_levels())
    testing::GemvTester().format(GgmlType::Q4_K).isa(level).cols(2048).rows(72).accumulate(true).Test();
}

}  // namespace
}  // namespace zenmoe
