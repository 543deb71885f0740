#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"

namespace zenmoe::ref {
namespace {

TEST(Fp16, SpecExamples) {
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xC040), -3.0f);
  EXPECT_EQ(bf16_to_fp32(0x4049), 3.140625f);
}

TEST(Fp16, SpecialValues) {
  EXPECT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7C00)));
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xFC00)) && fp16_to_fp32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_EQ(fp16_to_fp32(0x03FF), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(fp16_to_fp32(0x0400), 0x1p-14f);         // smallest normal
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // tie rounds to even = inf
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);          // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(fp32_to_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(0x1.8p-24f), 0x0002);        // tie 1.5 ulp -> even 2
  EXPECT_EQ(fp32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(std::bit_cast<float>(0x7FC00000u)), 0x7E00);
  EXPECT_EQ(fp32_to_fp16(std::bit_cast<float>(0xFF800001u)) & 0xFE00, 0xFE00);  // sNaN -> quiet NaN
}

// Every f16 against the textbook formula (-1)^s * 2^(e-15) * (1 + m/1024), subnormals
// 2^-14 * m/1024, with infinities and NaN payloads carried into the f32 bits.
TEST(Fp16, ExhaustiveToFp32) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float got = fp16_to_fp32(static_cast<f16_t>(h));
    if (e == 31) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), (s << 31) | 0x7F800000u | (m << 13)) << std::hex << h;
      continue;
    }
    const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, static_cast<int>(e) - 25);
    ASSERT_EQ(got, static_cast<float>(s ? -mag : mag)) << std::hex << h;
    ASSERT_EQ(std::signbit(got), s == 1) << std::hex << h;
  }
}

// Every finite f16 survives f16 -> f32 -> f16; the f32 value halfway to the next f16 rounds
// to the one with an even mantissa; values just off the midpoint round to the nearer one.
TEST(Fp16, ExhaustiveRoundTripAndTies) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const f16_t hh = static_cast<f16_t>(h);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(hh)));
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(hh)), hh) << std::hex << h;
    if ((h & 0x7FFF) >= 0x7BFF) continue;  // no finite successor
    const double a = fp16_to_fp32(hh), b = fp16_to_fp32(static_cast<f16_t>(h + 1));
    const float mid = static_cast<float>((a + b) / 2);  // exact in f32
    const f16_t even = (h & 1) ? static_cast<f16_t>(h + 1) : hh;
    ASSERT_EQ(fp32_to_fp16(mid), even) << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, static_cast<float>(a))), hh) << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, static_cast<float>(b))), h + 1) << std::hex << h;
  }
}

// Cross-check against the compiler's own _Float16 conversion (libgcc, round to nearest even).
TEST(Fp16, MatchesCompilerConversion) {
  std::mt19937 rng(42);
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const _Float16 c = static_cast<_Float16>(f);
    ASSERT_EQ(fp32_to_fp16(f), std::bit_cast<uint16_t>(c)) << std::hexfloat << f;
  }
}

TEST(Bf16, RoundingAndNan) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // overflow to inf
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);  // sNaN -> quiet
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0xFFC00000u)), 0xFFC0);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_fp32(static_cast<bf16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_bf16(f), b);
  }
}

TEST(PlainTraits, TableAndDots) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    const FormatTraits* tr = format_traits(t);
    ASSERT_NE(tr, nullptr);
    EXPECT_EQ(tr->vec_dot_type, t);
    EXPECT_EQ(tr->block_bytes, type_geometry(t)->block_bytes);
    EXPECT_STREQ(tr->name, type_name(t));
  }
  const float w[5] = {1.0f, -2.0f, 0.5f, 3.0f, 65504.0f};
  const float x[5] = {0.25f, 4.0f, -8.0f, 1.5f, 1.0f};
  EXPECT_EQ(vec_dot_row(GgmlType::F32, w, x, 5), 0.25f - 8.0f - 4.0f + 4.5f + 65504.0f);
  f16_t wh[5], xh[5];
  from_float_f16(w, wh, 5);
  EXPECT_EQ(vec_dot_row_f32(GgmlType::F16, wh, x, 5), 0.25f - 8.0f - 4.0f + 4.5f + 65504.0f);
  bf16_t wb[5];
  quantize_row(GgmlType::BF16, w, wb, 5);
  float back[5];
  dequantize_row(GgmlType::BF16, wb, back, 5);
  EXPECT_EQ(back[4], 65536.0f);  // 65504 rounds to 65536 in bf16
  from_float_f16(x, xh, 5);
  EXPECT_EQ(vec_dot_row(GgmlType::F16, wh, xh, 5), 0.25f - 8.0f - 4.0f + 4.5f + 65504.0f);
}

// The traits table agrees with the geometry table and with spec §2.12's vec_dot types.
TEST(FormatTraitsTable, AllFormats) {
  const struct {
    GgmlType t;
    GgmlType dot;
    bool quantiser;
  } want[] = {
      {GgmlType::F32, GgmlType::F32, true},    {GgmlType::F16, GgmlType::F16, true},
      {GgmlType::BF16, GgmlType::BF16, true},  {GgmlType::Q4_0, GgmlType::Q8_0, true},
      {GgmlType::Q5_0, GgmlType::Q8_0, true},  {GgmlType::Q8_0, GgmlType::Q8_0, true},
      {GgmlType::Q4_K, GgmlType::Q8_K, true},  {GgmlType::Q5_K, GgmlType::Q8_K, true},
      {GgmlType::Q6_K, GgmlType::Q8_K, true},  {GgmlType::Q8_K, GgmlType::Q8_K, true},
      {GgmlType::IQ4_XS, GgmlType::Q8_K, false},
  };
  for (const auto& w : want) {
    const FormatTraits* tr = format_traits(w.t);
    ASSERT_NE(tr, nullptr) << type_name(w.t);
    EXPECT_EQ(tr->type, w.t);
    EXPECT_STREQ(tr->name, type_name(w.t));
    EXPECT_EQ(tr->block_elems, type_geometry(w.t)->block_elems) << tr->name;
    EXPECT_EQ(tr->block_bytes, type_geometry(w.t)->block_bytes) << tr->name;
    EXPECT_EQ(tr->vec_dot_type, w.dot) << tr->name;
    EXPECT_NE(tr->to_float, nullptr) << tr->name;
    EXPECT_EQ(tr->from_float != nullptr, w.quantiser) << tr->name;
    // Q8_K is activation-only; every other format dots with its activation format, which
    // must itself be quantisable.
    EXPECT_EQ(tr->vec_dot != nullptr, w.t != GgmlType::Q8_K) << tr->name;
    EXPECT_NE(format_traits(tr->vec_dot_type)->from_float, nullptr) << tr->name;
  }
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q2_K, GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::I8})
    EXPECT_EQ(format_traits(t), nullptr) << type_name(t);
}

TEST(PlainTraits, CheckRowRejects) {
  EXPECT_TRUE(check_row(GgmlType::F16, 7).is_ok());
  EXPECT_FALSE(check_row(GgmlType::F16, -1).is_ok());
  const Status s = check_row(GgmlType::Q2_K, 256);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("q2_K"), std::string::npos);
}

}  // namespace
}  // namespace zenmoe::ref
