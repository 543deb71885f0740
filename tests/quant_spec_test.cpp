// Every worked example of spec §1.7 (tensor bytes -> values) and §2 (block formats), checked
// bit-exactly against the values, sums and sums of squares the spec gives.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/kscales.h"
#include "kernels/ref/quant.h"

namespace zenmoe::ref {
namespace {

struct Stats {
  double sum = 0, sumsq = 0;
};
Stats stats(const std::vector<float>& y) {
  Stats s;
  for (float v : y) {
    s.sum += v;
    s.sumsq += static_cast<double>(v) * v;
  }
  return s;
}

std::vector<float> dequant(GgmlType t, const void* block, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  EXPECT_TRUE(check_row(t, n).is_ok());
  dequantize_row(t, block, y.data(), n);
  return y;
}

void expect_values(const std::vector<float>& y, size_t first, const std::vector<float>& want) {
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(y[first + k], want[k]) << "index " << first + k;
}

const uint8_t kScales[12] = {0x81, 0x82, 0x83, 0xc4, 0x40, 0x41, 0x42, 0x83, 0x01, 0x12, 0x23, 0x8f};

TEST(SpecExample, GgufDataSectionF32) {
  // The data section of the §1.7 file: tensor "a" {4, 2} holding 0..7.
  const uint8_t data[32] = {0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40,
                            0, 0, 0x80, 0x40, 0, 0, 0xa0, 0x40, 0, 0, 0xc0, 0x40, 0, 0, 0xe0, 0x40};
  const auto y = dequant(GgmlType::F32, data, 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y[i], static_cast<float>(i));
}

TEST(SpecExample, Q4_0) {
  const uint8_t b[18] = {0x00, 0x38, 0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7,
                         0x08, 0x19, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f};
  const auto y = dequant(GgmlType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(y[j], -4.0f + 0.5f * j);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(y[16 + j], 0.5f * static_cast<float>(((j + 8) & 15) - 8));
  EXPECT_EQ(stats(y).sum, -8);
  EXPECT_EQ(stats(y).sumsq, 172);
}

TEST(SpecExample, Q5_0) {
  const uint8_t b[22] = {0x00, 0x38, 0x5a, 0xa5, 0xf0, 0xf0, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4,
                         0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
  const auto y = dequant(GgmlType::Q5_0, b, 32);
  expect_values(y, 0, {-8, 0.5, -7, 1.5, 2, -5.5, 3, -4.5, 4, -3.5, 5, -2.5, -2, 6.5, -1, 7.5});
  expect_values(y, 16, {-0.5, -1, -1.5, -2, 5.5, 5, 4.5, 4, -4.5, -5, -5.5, -6, 1.5, 1, 0.5, 0});
  EXPECT_EQ(stats(y).sum, -8);
  EXPECT_EQ(stats(y).sumsq, 556);
}

TEST(SpecExample, Q8_0) {
  uint8_t b[34] = {0x00, 0x34};
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(j - 16);
  const auto y = dequant(GgmlType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j - 16) * 0.25f);
  EXPECT_EQ(stats(y).sum, -4);
  EXPECT_EQ(stats(y).sumsq, 171);
}

TEST(SpecExample, KScalePacking) {
  const uint8_t sc[8] = {1, 2, 3, 4, 33, 34, 35, 63}, m[8] = {0, 1, 2, 3, 16, 17, 18, 40};
  uint8_t S[12];
  kscale_pack(sc, m, S);
  for (int k = 0; k < 12; ++k) EXPECT_EQ(S[k], kScales[k]) << k;
  for (int j = 0; j < 8; ++j) {
    uint8_t a, b;
    kscale_get(kScales, j, &a, &b);
    EXPECT_EQ(a, sc[j]);
    EXPECT_EQ(b, m[j]);
  }
}

BlockQ4_K spec_q4_K_block() {
  BlockQ4_K b;
  b.d = 0x3C00;
  b.dmin = 0x3800;
  std::memcpy(b.scales, kScales, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(i);
  return b;
}

TEST(SpecExample, Q4_K) {
  const BlockQ4_K b = spec_q4_K_block();
  const auto y = dequant(GgmlType::Q4_K, &b, 256);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(y[l], static_cast<float>(l % 16));
  for (int l = 32; l < 48; ++l) EXPECT_EQ(y[l], -0.5f);
  for (int l = 48; l < 64; ++l) EXPECT_EQ(y[l], 1.5f);
  for (int q = 0; q < 16; ++q) EXPECT_EQ(y[64 + q], 3.0f * q - 1);
  for (int l = 96; l < 112; ++l) EXPECT_EQ(y[l], 6.5f);
  for (int l = 112; l < 128; ++l) EXPECT_EQ(y[l], 10.5f);
  for (int q = 0; q < 16; ++q) EXPECT_EQ(y[128 + q], 33.0f * q - 8);
  for (int l = 160; l < 176; ++l) EXPECT_EQ(y[l], 127.5f);
  for (int l = 176; l < 192; ++l) EXPECT_EQ(y[l], 161.5f);
  EXPECT_EQ(y[192], -9.0f);
  EXPECT_EQ(y[193], 26.0f);
  EXPECT_EQ(y[207], 516.0f);
  for (int l = 224; l < 240; ++l) EXPECT_EQ(y[l], 358.0f);
  for (int l = 240; l < 256; ++l) EXPECT_EQ(y[l], 421.0f);
  EXPECT_EQ(stats(y).sum, 34080);
  EXPECT_EQ(stats(y).sumsq, 11055208);
}

TEST(SpecExample, Q5_K) {
  BlockQ5_K b;
  b.d = 0x3C00;
  b.dmin = 0x3800;
  std::memcpy(b.scales, kScales, 12);
  for (int i = 0; i < 32; ++i) b.qh[i] = static_cast<uint8_t>((7 * i + 3) & 0xFF);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(255 - i);
  const auto y = dequant(GgmlType::Q5_K, &b, 256);
  expect_values(y, 0, {31, 14, 29, 12, 27, 10, 25, 8, 23, 6, 21, 4, 19, 2, 17, 0});
  expect_values(y, 32, {61.5, 61.5, 29.5, 29.5, 61.5, 61.5, 29.5, 29.5});
  expect_values(y, 128, {487, 454, 949, 916, 883, 322, 289, 784, 751, 190, 157, 652, 619, 586, 25, -8});
  EXPECT_EQ(stats(y).sum, 86304);
  EXPECT_EQ(stats(y).sumsq, 69395688);
}

TEST(SpecExample, Q6_K) {
  BlockQ6_K b;
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>((37 * i) & 0xFF);
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>((i & 1) ? -(i + 1) : (i + 1));
  b.d = 0x3000;
  const auto y = dequant(GgmlType::Q6_K, &b, 256);
  expect_values(y, 0, {-4, -1.875, 0.25, 2.375, -3.5, -1.375, 0.75, 2.875, -3, -0.875, 1.25, 3.375,
                       -2.5, -0.375, 1.75, 3.875});
  expect_values(y, 16, {8, 3.75, -0.5, -4.75, 7, 2.75, -1.5, -5.75, 6, 1.75, -2.5, -6.75, 5, 0.75,
                        -3.5, -7.75});
  EXPECT_EQ(stats(y).sum, -204);
  EXPECT_EQ(stats(y).sumsq, 133390.5);
}

TEST(SpecExample, IQ4_XS) {
  BlockIQ4_XS b;
  b.d = 0x3C00;
  b.scales_h = 0xE41B;
  const uint8_t sl[4] = {0x10, 0x32, 0x54, 0x76};
  std::memcpy(b.scales_l, sl, 4);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i & 15) | (((i + 5) & 15) << 4));
  const auto y = dequant(GgmlType::IQ4_XS, &b, 256);
  expect_values(y, 0, {-2032, -1664, -1328, -1040, -784, -560, -352, -160, 16, 208, 400, 608, 848,
                       1104, 1424, 1808});
  const int8_t* kv = iq4nl_codebook();
  for (int j = 0; j < 16; ++j) EXPECT_EQ(y[32 + j], static_cast<float>(kv[j]));  // dl = 1
  EXPECT_EQ(stats(y).sum, 6768);
  EXPECT_EQ(stats(y).sumsq, 402261504);
  EXPECT_EQ(format_traits(GgmlType::IQ4_XS)->vec_dot_type, GgmlType::Q8_K);
}

std::vector<float> spec_activations() {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(((7 * i) % 23) - 11) * 0.05f;
  return x;
}

TEST(SpecExample, Q8_K) {
  const auto x = spec_activations();
  BlockQ8_K q;
  quantize_row(GgmlType::Q8_K, x.data(), &q, 256);
  EXPECT_EQ(q.d, 0x1.1bd13cp-8f);
  const int8_t qs[20] = {-127, -46, 35, 115, -69, 12, 92, -92, -12, 69,
                         -115, -35, 46, 127, -58, 23, 104, -81, 0, 81};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(q.qs[i], qs[i]) << i;
  const int16_t bsums[16] = {-35, -57, -81, 161, -126, 115, 92, -196, 47, 22, 0, -22, -47, 196, -92, -115};
  for (int g = 0; g < 16; ++g) EXPECT_EQ(q.bsums[g], bsums[g]) << g;
}

// ggml prints -358.327148 for this dot; the printed digits name a unique float (ulp at 358 is
// 3.05e-5), and the reference reproduces it exactly because it sums in ggml's generic lane
// order. (Combining the block as (d*d8)*Σ - (dmin*d8)*Σmin instead gives -358.327179, 1 ulp off.)
TEST(SpecExample, Q4K_Q8K_VecDot) {
  const BlockQ4_K w = spec_q4_K_block();
  const auto x = spec_activations();
  BlockQ8_K q;
  quantize_row(GgmlType::Q8_K, x.data(), &q, 256);
  const float r = vec_dot_row(GgmlType::Q4_K, &w, &q, 256);
  EXPECT_EQ(r, -358.327148f);
  EXPECT_EQ(vec_dot_row_f32(GgmlType::Q4_K, &w, x.data(), 256), r);
  // The same dot from the dequantised rows, in double: -358.327171 per the spec.
  std::vector<float> wf(256), xf(256);
  dequantize_row(GgmlType::Q4_K, &w, wf.data(), 256);
  dequantize_row(GgmlType::Q8_K, &q, xf.data(), 256);
  double dd = 0;
  for (int i = 0; i < 256; ++i) dd += static_cast<double>(wf[i]) * xf[i];
  EXPECT_NEAR(dd, -358.327171, 5e-7);
  double df = 0;
  for (int i = 0; i < 256; ++i) df += static_cast<double>(wf[i]) * x[i];
  EXPECT_NEAR(df, -361.050016, 5e-6);
}

}  // namespace
}  // namespace zenmoe::ref
