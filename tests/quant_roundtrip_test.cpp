// Quantise -> dequantise round trips: measured error per format on a fixed Gaussian input,
// per-element error bounds, degenerate inputs and awkward sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"
#include "kernels/ref/rounding.h"

namespace zenmoe::ref {
namespace {

// Deterministic N(0, 1) samples (splitmix64 + Box-Muller), identical on every platform.
std::vector<float> gaussian(int64_t n, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  auto next = [&seed]() {
    uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1p-53;
  };
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = 1.0 - next(), u2 = next();
    const double r = std::sqrt(-2.0 * std::log(u1));
    x[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) x[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
  }
  return x;
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  EXPECT_TRUE(check_row(t, n, true).is_ok());
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, n)));
  quantize_row(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(y[i]) - x[i];
    e += d * d;
    s += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

// Relative RMS error sqrt(Σ(y-x)²/Σx²) on 65536 N(0,1) samples (seed 1). Measured values:
//   q4_0 0.08606  q5_0 0.04279  q8_0 0.005368  q4_K 0.07157  q5_K 0.03616  q6_K 0.01779
//   q8_K 0.006988 f16 0.000208  bf16 0.001649
// The weight quantisers are the ggml reference algorithms (OracleQuantise shows they give
// llama-quantize's exact bytes), so these are also llama.cpp's figures. Bounds: measured + ~3%.
TEST(QuantRms, GaussianRelativeError) {
  const auto x = gaussian(65536, 1);
  const struct {
    GgmlType t;
    double bound;
  } cases[] = {
      {GgmlType::Q4_0, 0.0887}, {GgmlType::Q5_0, 0.0441}, {GgmlType::Q8_0, 0.00553},
      {GgmlType::Q4_K, 0.0737}, {GgmlType::Q5_K, 0.0372}, {GgmlType::Q6_K, 0.0183},
      {GgmlType::Q8_K, 0.00720}, {GgmlType::F16, 0.000214}, {GgmlType::BF16, 0.00170},
  };
  for (const auto& c : cases) {
    const double e = rel_rms(x, round_trip(c.t, x));
    std::printf("  relative RMS error %-5s %.6f\n", type_name(c.t), e);
    EXPECT_LT(e, c.bound) << type_name(c.t);
    EXPECT_GT(e, c.bound * 0.5) << type_name(c.t) << ": suspiciously small, is the test right?";
  }
}


// Per-element bounds that follow from each quantiser's definition.
TEST(QuantRoundTrip, PerElementErrorBounds) {
  const auto x = gaussian(4096, 7);
  const auto q8k = round_trip(GgmlType::Q8_K, x);
  const auto q80 = round_trip(GgmlType::Q8_0, x);
  const auto q40 = round_trip(GgmlType::Q4_0, x);
  const auto q50 = round_trip(GgmlType::Q5_0, x);
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    for (size_t i = b; i < b + 32; ++i) {
      // Q8_0: half a step, plus the f16 rounding of d (at most 2^-11 relative) times |q| <= 127.
      EXPECT_LE(std::fabs(q80[i] - x[i]), amax / 127 * (0.5f + 127 * 0x1p-11f)) << i;
      // Q4_0 / Q5_0: the code for -max is clamped one step short, so up to one full step.
      EXPECT_LE(std::fabs(q40[i] - x[i]), amax / 8 * 1.01f) << i;
      EXPECT_LE(std::fabs(q50[i] - x[i]), amax / 16 * 1.01f) << i;
    }
  }
  for (size_t b = 0; b < x.size(); b += 256) {
    float amax = 0;
    for (size_t i = b; i < b + 256; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    for (size_t i = b; i < b + 256; ++i) EXPECT_LE(std::fabs(q8k[i] - x[i]), amax / 127 * 0.5001f) << i;
  }
}

constexpr GgmlType kQuantisable[] = {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K,
                                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::F16,
                                     GgmlType::BF16, GgmlType::F32};

TEST(QuantRoundTrip, DegenerateInputs) {
  const int64_t n = 512;
  std::vector<std::vector<float>> inputs;
  inputs.emplace_back(n, 0.0f);
  inputs.emplace_back(n, 0.75f);                 // constant positive: K-quants fit min = 0
  inputs.emplace_back(n, -3.0f);                 // constant negative
  inputs.emplace_back(n, 1e-20f);                // scales underflow f16
  std::vector<float> spike(n, 0.0f);
  spike[37] = -5.0f;
  spike[300] = 2.0f;
  inputs.push_back(spike);
  for (GgmlType t : kQuantisable) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto y = round_trip(t, inputs[k]);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << type_name(t) << " input " << k << " index " << i;
        if (k == 0) {
          ASSERT_EQ(y[i], 0.0f) << type_name(t);  // all zeros stay exactly zero
        }
      }
    }
    const auto ys = round_trip(t, spike);
    EXPECT_NEAR(ys[37], -5.0f, 5.0f / 100) << type_name(t);  // the block maximum survives
    const auto yc = round_trip(t, inputs[2]);
    EXPECT_NEAR(yc[0], -3.0f, 3.0f / 60) << type_name(t);
  }
}

// A row is quantised block by block: any row equals the concatenation of its blocks, and a
// row of 0 elements is valid and writes nothing.
TEST(QuantRoundTrip, RowsAreIndependentBlocks) {
  const auto x = gaussian(7168, 3);
  for (GgmlType t : kQuantisable) {
    const FormatTraits* tr = format_traits(t);
    ASSERT_NE(tr, nullptr);
    std::vector<uint8_t> row(static_cast<size_t>(row_bytes(t, 7168))), blk(static_cast<size_t>(tr->block_bytes));
    quantize_row(t, x.data(), row.data(), 7168);
    for (int64_t b = 0; b < 7168 / tr->block_elems; ++b) {
      quantize_row(t, x.data() + b * tr->block_elems, blk.data(), tr->block_elems);
      ASSERT_EQ(std::memcmp(blk.data(), row.data() + b * tr->block_bytes, blk.size()), 0)
          << type_name(t) << " block " << b;
    }
    EXPECT_TRUE(check_row(t, 0, true).is_ok());
    uint8_t guard = 0xA5;
    quantize_row(t, x.data(), &guard, 0);
    EXPECT_EQ(guard, 0xA5);
  }
}

TEST(QuantRoundTrip, CheckRowErrors) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q8_K, GgmlType::IQ4_XS}) {
    const Status s = check_row(t, format_traits(t)->block_elems + 1);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(type_name(t)), std::string::npos) << s.message();
  }
  EXPECT_TRUE(check_row(GgmlType::IQ4_XS, 256).is_ok());
  EXPECT_FALSE(check_row(GgmlType::IQ4_XS, 256, true).is_ok());  // no quantiser
  EXPECT_FALSE(check_row(GgmlType::Q4_1, 32).is_ok());           // no reference numerics
  std::vector<float> y(32, 0.0f);
  dequantize_row(GgmlType::Q4_1, nullptr, y.data(), 32);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(vec_dot_row(GgmlType::Q8_K, nullptr, nullptr, 256)));
}

TEST(QuantRounding, NearestIntIsHalfToEven) {
  EXPECT_EQ(nearest_int(2.5f), 2);
  EXPECT_EQ(nearest_int(3.5f), 4);
  EXPECT_EQ(nearest_int(-2.5f), -2);
  EXPECT_EQ(nearest_int(-3.5f), -4);
  EXPECT_EQ(nearest_int(0.49999997f), 0);
  EXPECT_EQ(nearest_int(-127.0f), -127);
  EXPECT_EQ(nearest_int(4194303.0f), 4194303);
}

// The reference Q8_0 rounds half away from zero (roundf); ggml's x86 path rounds half to even.
TEST(QuantRounding, Q8_0ReferenceVersusX86Ties) {
  float x[32] = {127.0f, 2.5f, -2.5f, 3.5f, 0.5f, -0.5f};
  BlockQ8_0 ref_b, x86_b;
  from_float_q8_0(x, &ref_b, 32);
  from_float_q8_0_x86(x, &x86_b, 32);
  EXPECT_EQ(ref_b.d, 0x3C00);  // d = 127/127 = 1
  EXPECT_EQ(x86_b.d, ref_b.d);
  const int8_t want_ref[6] = {127, 3, -3, 4, 1, -1}, want_x86[6] = {127, 2, -2, 4, 0, 0};
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(ref_b.qs[j], want_ref[j]) << j;
    EXPECT_EQ(x86_b.qs[j], want_x86[j]) << j;
  }
  // Away from ties the two agree to within one code everywhere.
  const auto g = gaussian(4096, 11);
  std::vector<BlockQ8_0> a(128), b(128);
  from_float_q8_0(g.data(), a.data(), 4096);
  from_float_q8_0_x86(g.data(), b.data(), 4096);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(a[i].d, b[i].d);
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::abs(a[i].qs[j] - b[i].qs[j]), 1);
  }
}

TEST(QuantQ8K, SignScaleAndBsums) {
  auto x = gaussian(1024, 5);
  x[3] = 9.0f;      // block 0: positive maximum -> negative d, maps to -127
  x[256] = -9.0f;   // block 1: negative maximum -> positive d, still maps to -127
  x[600] = 4.0f;    // block 2: first of two equal magnitudes wins
  x[601] = -4.0f;
  std::vector<BlockQ8_K> q(4);
  quantize_row(GgmlType::Q8_K, x.data(), q.data(), 1024);
  EXPECT_LT(q[0].d, 0.0f);
  EXPECT_EQ(q[0].qs[3], -127);
  EXPECT_GT(q[1].d, 0.0f);
  EXPECT_EQ(q[1].qs[0], -127);
  EXPECT_LT(q[2].d, 0.0f);
  EXPECT_EQ(q[2].qs[600 - 512], -127);
  EXPECT_EQ(q[2].qs[601 - 512], 127);
  for (const auto& b : q) {
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int k = 0; k < 16; ++k) s += b.qs[16 * g + k];
      EXPECT_EQ(b.bsums[g], s);
    }
  }
  std::vector<float> z(256, 0.0f);
  BlockQ8_K zq;
  std::memset(&zq, 0x5A, sizeof zq);
  quantize_row(GgmlType::Q8_K, z.data(), &zq, 256);
  EXPECT_EQ(zq.d, 0.0f);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(zq.bsums[g], 0);
}

}  // namespace
}  // namespace zenmoe::ref
