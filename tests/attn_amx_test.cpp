// The AMX decode attention against a double-precision softmax attention over the stored rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codegen/isa.h"
#include "kernels/ref/fp16.h"
#include "runtime/attn_amx.h"
#include "runtime/fast_attention.h"

namespace zenmoe {
namespace {

struct Case {
  int64_t m, n, W, R;
  bool f16;
};

struct Rows {
  std::vector<uint16_t> bits;  // n rows of `stride` elements (W used)
  std::vector<double> value;   // the same rows as doubles, n x W
  int64_t stride = 0;
};

Rows make_rows(const Case& c, std::mt19937& rng, float extreme) {
  Rows r;
  r.stride = c.W + 32;  // rows with a gap, as a cache with a wider stride would have
  r.bits.assign(static_cast<size_t>(c.n * r.stride), 0);
  r.value.resize(static_cast<size_t>(c.n * c.W));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t j = 0; j < c.n; ++j)
    for (int64_t k = 0; k < c.W; ++k) {
      float v = u(rng);
      if (j % 7 == 3 && k % 5 == 0) v *= extreme;  // a few large elements
      const uint16_t b = c.f16 ? ref::fp32_to_fp16(v) : ref::fp32_to_bf16(v);
      r.bits[static_cast<size_t>(j * r.stride + k)] = b;
      r.value[static_cast<size_t>(j * c.W + k)] = c.f16 ? ref::fp16_to_fp32(b) : ref::bf16_to_fp32(b);
    }
  return r;
}

struct Result {
  std::vector<float> y, smax, inv;
};

Result run_amx(const Case& c, const std::vector<float>& q, const Rows& rows, float scale,
               const std::vector<int64_t>& side) {
  Result out;
  out.y.assign(static_cast<size_t>(c.m * c.R), -7.0f);
  out.smax.assign(static_cast<size_t>(c.m), 0.0f);
  out.inv.assign(static_cast<size_t>(c.m), 0.0f);
  AlignedFloats scratch(static_cast<size_t>(amx_attend_scratch_floats(c.m, c.W, c.R)), std::nanf(""));
  AmxAttnCall call{.q = q.data(),
                   .m = c.m,
                   .rows = reinterpret_cast<const uint8_t*>(rows.bits.data()),
                   .stride = rows.stride * 2,
                   .n = c.n,
                   .W = c.W,
                   .R = c.R,
                   .scale = scale,
                   .f16 = c.f16,
                   .y = out.y.data(),
                   .smax = out.smax.data(),
                   .inv = out.inv.data(),
                   .side = side.empty() ? nullptr : side.data(),
                   .side_ranges = static_cast<int64_t>(side.size() / 2)};
  amx_attend(call, scratch.data());
  return out;
}

void check(const Case& c, float extreme) {
  SCOPED_TRACE(::testing::Message() << "m=" << c.m << " n=" << c.n << " W=" << c.W << " R=" << c.R
                                    << (c.f16 ? " f16" : " bf16") << " extreme=" << extreme);
  std::mt19937 rng(static_cast<uint32_t>(c.m * 1000 + c.n + (c.f16 ? 7 : 0)));
  const Rows rows = make_rows(c, rng, extreme);
  std::vector<float> q(static_cast<size_t>(c.m * c.W));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : q) v = u(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.W));
  // A side stream over a buffer of our own: it only prefetches, so the results are the same.
  std::vector<uint8_t> weights(100000, 1);
  const std::vector<int64_t> side = {reinterpret_cast<int64_t>(weights.data()), 70000,
                                     reinterpret_cast<int64_t>(weights.data() + 80000), 20000};
  const Result a = run_amx(c, q, rows, scale, side);
  const Result b = run_amx(c, q, rows, scale, {});
  EXPECT_EQ(0, std::memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(float))) << "not bit-identical";

  double worst = 0.0;
  for (int64_t h = 0; h < c.m; ++h) {
    std::vector<double> s(static_cast<size_t>(c.n));
    double mx = -1e300, size = 0.0;
    for (int64_t j = 0; j < c.n; ++j) {
      double d = 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.W; ++k) {
        const double t =
            static_cast<double>(q[static_cast<size_t>(h * c.W + k)]) * rows.value[static_cast<size_t>(j * c.W + k)];
        d += t;
        mag += std::fabs(t);
      }
      s[static_cast<size_t>(j)] = scale * d;
      mx = std::max(mx, s[static_cast<size_t>(j)]);
      size = std::max(size, scale * mag);
    }
    double sum = 0.0;
    std::vector<double> y(static_cast<size_t>(c.R), 0.0);
    for (int64_t j = 0; j < c.n; ++j) {
      const double p = std::exp(s[static_cast<size_t>(j)] - mx);
      sum += p;
      for (int64_t k = 0; k < c.R; ++k) y[static_cast<size_t>(k)] += p * rows.value[static_cast<size_t>(j * c.W + k)];
    }
    // Scores carry ~2^-16 of their terms' magnitudes; the weights that much relative error.
    const double score_tol = 4e-5 * size + 1e-6;
    EXPECT_NEAR(a.smax[static_cast<size_t>(h)], mx, score_tol) << "head " << h;
    EXPECT_NEAR(a.inv[static_cast<size_t>(h)] * sum, 1.0, 4.0 * score_tol + 1e-5) << "head " << h;
    for (int64_t k = 0; k < c.R; ++k) {
      const double want = y[static_cast<size_t>(k)] / sum;
      const double err = std::fabs(a.y[static_cast<size_t>(h * c.R + k)] - want);
      worst = std::max(worst, err / (4.0 * score_tol * extreme + 1e-5 * extreme));
    }
  }
  EXPECT_LE(worst, 1.0) << "largest error over its bound";
}

class AmxAttend : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!isa::host_supports(isa::IsaLevel::kAmx)) GTEST_SKIP() << "host has no usable AMX tiles";
  }
};

TEST_P(AmxAttend, MatchesDoublePrecisionSoftmaxOverAwkwardShapes) {
  const bool f16 = GetParam();
  // Heads: 1, one short of a half tile, a full group, past it; rows: 1, a tile less or more one,
  // a chunk and more (the online softmax between chunks), the bench preset's and a small width.
  for (int64_t m : {1, 7, 16, 17, 40})
    for (int64_t n : {1, 15, 17, 129, 300}) check({m, n, 576, 512, f16}, 1.0f);
  check({5, 45, 96, 64, f16}, 1.0f);
  check({9, 200, 64, 64, f16}, 1.0f);
  check({16, 140, 576, 512, f16}, 30.0f);  // large elements: scores far apart, peaked softmax
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, AmxAttend, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "f16" : "bf16"; });

TEST(AmxAttendFits, OnlyWidthsOfWholeTiles) {
  EXPECT_TRUE(amx_attend_fits(576, 512));
  EXPECT_TRUE(amx_attend_fits(64, 64));
  EXPECT_FALSE(amx_attend_fits(576, 500));
  EXPECT_FALSE(amx_attend_fits(560, 512));
  EXPECT_FALSE(amx_attend_fits(512, 576));
  EXPECT_FALSE(amx_attend_fits(0, 0));
}

}  // namespace
}  // namespace zenmoe
