// The generated heads-in-lanes decode attention (GlueOp::kAttnDecode) against a double-precision
// softmax attention over the same rows: F32, F16, BF16 and Q8_0 rows, head counts around the
// lane groups (1, 3, 8, 16, 17, 40, 64, 129), fewer query rows than the kernel's heads, row
// counts around the tile and the 12-row groups (1, 5, 13, 47, 48, 49, 61, 96, 200), odd widths,
// value widths off the 32-column blocks, rows padded apart, code scheduled for each target CPU;
// nothing written past the outputs or the working memory, the softmax maximum and sum reported
// per head, and the same bits on a second call with a used scratch and a side stream. At the
// AVX512_BF16 level BF16 rows of even width take the bf16 dot form: its reference rounds the
// queries to bf16 as the kernel does, and allows the rounding of each probability to bf16
// (relative 2^-8). At the AVX-512 VNNI level Q8_0 rows take the int8 score form: its reference
// quantises the queries to q8_0 blocks as ggml quantises activations (ref::from_float_q8_0_x86).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "codegen/isa.h"
#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"
#include "codegen/glue.h"
#include "runtime/executor.h"
#include "runtime/fast_attention.h"

namespace zenmoe {
namespace {

struct Shape {
  int64_t heads, m, n, width, v_width;
};

TEST(GlueAttn, DecodeMatchesDoubleSoftmaxAttentionOverAwkwardShapes) {
  if (!isa::host_supports(isa::IsaLevel::kAvx512)) GTEST_SKIP() << "the kernel needs AVX-512";
  const Shape shapes[] = {{16, 16, 200, 576, 512}, {1, 1, 1, 576, 512},   {3, 3, 5, 40, 32},  {17, 17, 47, 72, 64},
                          {40, 40, 48, 33, 17},    {64, 64, 49, 576, 512}, {129, 129, 13, 24, 7},
                          {8, 8, 200, 19, 19},     {16, 5, 61, 64, 64},    {64, 37, 96, 576, 512}};
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  AlignedFloats scratch;  // on a cache line, as the kernel requires
  const GlueCpu cpus[] = {GlueCpu::kHost, GlueCpu::kZnver4, GlueCpu::kZnver5};  // scheduling models, by turns
  int turn = 0;
  struct Case {
    isa::IsaLevel level;
    KvCacheType kv;
    int cpu;  // index into cpus, or -1: by turns
  };
  std::vector<Case> cases;
  for (KvCacheType kv : {KvCacheType::F32, KvCacheType::F16, KvCacheType::BF16, KvCacheType::Q8_0})
    cases.push_back({isa::IsaLevel::kAvx512, kv, -1});
  // BF16 rows at the AVX512_BF16 level: the bf16 dot form when scheduled for Zen 4 or Zen 5,
  // the widening form otherwise.
  if (isa::host_supports(isa::IsaLevel::kAvx512Bf16))
    for (int cpu : {0, 1, 2}) cases.push_back({isa::IsaLevel::kAvx512Bf16, KvCacheType::BF16, cpu});
  // Q8_0 rows at the VNNI level: the int8 score form for every target CPU.
  if (isa::host_supports(isa::IsaLevel::kAvx512Vnni))
    for (int cpu : {0, 1, 2}) cases.push_back({isa::IsaLevel::kAvx512Vnni, KvCacheType::Q8_0, cpu});
  int dot_cases = 0, q8_dot_cases = 0;
  for (const Shape& sh : shapes)
    for (const auto& [level, kv, cpu_index] : cases) {
      const bool half = kv == KvCacheType::F16, bf = kv == KvCacheType::BF16, q8 = kv == KvCacheType::Q8_0;
      if (q8 && sh.width % 32 != 0) continue;  // Q8_0 rows are whole blocks
      const int64_t elems = q8 ? zenmoe::row_bytes(GgmlType::Q8_0, sh.width) : sh.width * (half || bf ? 2 : 4);
      const int64_t row_bytes = elems + 4 * (sh.n % 3);  // rows padded apart in some cases
      const uint8_t kv_code = half ? 1 : bf ? 2 : q8 ? 3 : 0;
      const float scale = 1.0f / std::sqrt(static_cast<float>(sh.width));
      const GlueDesc desc = glue_attn_decode_desc(static_cast<int32_t>(sh.heads), static_cast<int32_t>(sh.width),
                                                  static_cast<int32_t>(sh.v_width), kv_code, scale,
                                                  level, cpus[cpu_index >= 0 ? cpu_index : turn++ % 3]);
      const bool dot = glue_attn_bf16_dot(desc), q8_dot = glue_attn_q8_dot(desc);
      EXPECT_EQ(dot, level >= isa::IsaLevel::kAvx512Bf16 && sh.width % 2 == 0 && desc.cpu != GlueCpu::kHost);
      EXPECT_EQ(q8_dot, q8 && level >= isa::IsaLevel::kAvx512Vnni);
      dot_cases += dot;
      q8_dot_cases += q8_dot;
      const GlueAttnLayout layout = glue_attn_layout(desc);
      auto fn = glue_kernel(desc);
      ASSERT_TRUE(fn) << fn.error();
      std::vector<uint8_t> rows(static_cast<size_t>(row_bytes * sh.n));
      std::vector<float> rf(static_cast<size_t>(sh.width * sh.n));  // the rows' values as F32
      for (size_t i = 0; i < rf.size(); ++i) {
        const float x = 2.0f * nd(rng);
        if (q8) {
          rf[i] = x;
        } else if (bf) {
          const bf16_t b = ref::fp32_to_bf16(x);
          std::memcpy(rows.data() + (i / sh.width) * row_bytes + 2 * (i % sh.width), &b, 2);
          rf[i] = ref::bf16_to_fp32(b);
        } else if (half) {
          const f16_t h = ref::fp32_to_fp16(x);
          std::memcpy(rows.data() + (i / sh.width) * row_bytes + 2 * (i % sh.width), &h, 2);
          rf[i] = ref::fp16_to_fp32(h);
        } else {
          std::memcpy(rows.data() + (i / sh.width) * row_bytes + 4 * (i % sh.width), &x, 4);
          rf[i] = x;
        }
      }
      if (q8)
        for (int64_t j = 0; j < sh.n; ++j) {
          uint8_t* row = rows.data() + j * row_bytes;
          float* f = rf.data() + j * sh.width;
          ref::from_float_q8_0(f, row, sh.width);
          ref::dequantize_row(GgmlType::Q8_0, row, f, sh.width);
        }
      std::vector<float> q(static_cast<size_t>(sh.m * sh.width));
      for (float& x : q) x = nd(rng);
      const size_t ny = static_cast<size_t>(sh.m * sh.v_width);
      std::vector<float> y(ny + 16, -9.0f), smax(static_cast<size_t>(sh.m) + 1, -9.0f),
          inv(static_cast<size_t>(sh.m) + 1, -9.0f);
      // Grown only: earlier shapes' leftovers stay in it.
      if (scratch.size() < static_cast<size_t>(layout.floats + 1)) scratch.resize(static_cast<size_t>(layout.floats + 1));
      float* work = scratch.data();
      work[layout.floats] = -9.0f;
      GlueCall call{.x = q.data(),
                    .x2 = reinterpret_cast<const float*>(rows.data()),
                    .y = y.data(),
                    .q = work,
                    .n_rows = sh.m,
                    .stride = row_bytes,
                    .n = sh.n};
      (*fn)(&call);
      std::copy(work + layout.stats, work + layout.stats + sh.m, smax.begin());
      std::copy(work + layout.stats + 2 * layout.lanes, work + layout.stats + 2 * layout.lanes + sh.m, inv.begin());
      for (size_t i = ny; i < y.size(); ++i) ASSERT_EQ(y[i], -9.0f) << "wrote past y";
      ASSERT_EQ(work[layout.floats], -9.0f) << "wrote past the working memory";
      std::vector<float> qr = q;  // the queries as the kernel multiplies them
      if (dot)
        for (float& x : qr) x = ref::bf16_to_fp32(ref::fp32_to_bf16(x));
      if (q8_dot) {
        std::vector<uint8_t> blocks(static_cast<size_t>(zenmoe::row_bytes(GgmlType::Q8_0, sh.width)));
        for (int64_t k = 0; k < sh.m; ++k) {
          ref::from_float_q8_0_x86(qr.data() + k * sh.width, blocks.data(), sh.width);
          ref::dequantize_row(GgmlType::Q8_0, blocks.data(), qr.data() + k * sh.width, sh.width);
        }
      }
      for (int64_t k = 0; k < sh.m; ++k) {
        std::vector<double> s(static_cast<size_t>(sh.n));
        double mx = -1e300;
        for (int64_t j = 0; j < sh.n; ++j) {
          double a = 0;
          for (int64_t d = 0; d < sh.width; ++d)
            a += static_cast<double>(qr[static_cast<size_t>(k * sh.width + d)]) * rf[static_cast<size_t>(j * sh.width + d)];
          s[static_cast<size_t>(j)] = a * scale;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        const char* what = kv_cache_type_name(kv);
        EXPECT_NEAR(smax[static_cast<size_t>(k)], mx, 1e-5 * (1 + std::fabs(mx))) << what << " head " << k;
        EXPECT_NEAR(inv[static_cast<size_t>(k)], 1 / sum, 1e-5 / sum) << what << " head " << k;
        for (int64_t c = 0; c < sh.v_width; ++c) {
          double want = 0, mag = 0;  // mag: the weighted sum of the terms' magnitudes
          for (int64_t j = 0; j < sh.n; ++j) {
            const double r = rf[static_cast<size_t>(j * sh.width + c)];
            want += s[static_cast<size_t>(j)] * r;
            mag += s[static_cast<size_t>(j)] * std::fabs(r);
          }
          want /= sum;
          mag /= sum;
          const double tol = 2e-5 * (1 + std::fabs(want)) + (dot ? std::ldexp(mag, -8) : 0.0);
          ASSERT_NEAR(y[static_cast<size_t>(k * sh.v_width + c)], want, tol)
              << what << " m " << sh.m << " n " << sh.n << " width " << sh.width << " head " << k << " column " << c
              << (dot ? " bf16 dot" : q8_dot ? " int8 scores" : "");
        }
      }
      // A second call through the used scratch, with a side stream (ranges unaligned, of odd
      // lengths, one of a byte, one over the rows themselves), gives the same bits.
      std::vector<float> again(y.size(), -9.0f);
      std::vector<uint8_t> side(9000);
      auto at = [](const void* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); };
      const int64_t ranges[] = {at(side.data() + 3), 4001, at(side.data() + 4100), 1, at(rows.data()),
                                static_cast<int64_t>(rows.size()), at(side.data() + 5000), 4000};
      call.y = again.data();
      call.w = reinterpret_cast<const float*>(ranges);
      call.n_visible = 4;
      (*fn)(&call);
      EXPECT_EQ(std::memcmp(again.data(), y.data(), y.size() * sizeof(float)), 0);
    }
  if (isa::host_supports(isa::IsaLevel::kAvx512Bf16)) {
    EXPECT_EQ(dot_cases, 16);  // the even widths, for Zen 4 and for Zen 5
  }
  if (isa::host_supports(isa::IsaLevel::kAvx512Vnni)) {
    EXPECT_EQ(q8_dot_cases, 15);  // the widths that are whole blocks (5 shapes), for every CPU
  }
}

// The automatic side stream is cut per call (the L2 less the cache rows the call reads): the
// ranges kept in order, the one the budget ends in cut short, none after it.
TEST(SideStream, RangesWithinBudgetKeepOrderAndCutTheLast) {
  const std::vector<int64_t> ranges = {1000, 300, 5000, 200, 9000, 700};
  std::vector<int64_t> out = {7, 7, 7};  // replaced, not appended to
  side_ranges_within(ranges, 1200, out);
  EXPECT_EQ(out, ranges);
  side_ranges_within(ranges, 600, out);
  EXPECT_EQ(out, (std::vector<int64_t>{1000, 300, 5000, 200, 9000, 100}));
  side_ranges_within(ranges, 300, out);
  EXPECT_EQ(out, (std::vector<int64_t>{1000, 300}));
  side_ranges_within(ranges, 301, out);
  EXPECT_EQ(out, (std::vector<int64_t>{1000, 300, 5000, 1}));
  side_ranges_within(ranges, 0, out);
  EXPECT_TRUE(out.empty());
  side_ranges_within({}, 4096, out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace zenmoe
