// The weight packer and its packed-layout reference (kernels/pack.h).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/pack.h"
#include "kernels/ref/kscales.h"
#include "kernels/ref/quant.h"

namespace zenmoe {
namespace {

// Spec §2.6 Q4_K block and §2.12 activations: the packed reference must give -358.327148
// exactly like the reference vec_dot.
TEST(PackQ4K, SpecWorkedExample) {
  const uint8_t head[16] = {0x00, 0x3c, 0x00, 0x38, 0x81, 0x82, 0x83, 0xc4,
                            0x40, 0x41, 0x42, 0x83, 0x01, 0x12, 0x23, 0x8f};
  std::vector<uint8_t> w(sizeof(BlockQ4_K));
  std::memcpy(w.data(), head, 16);
  for (int i = 0; i < 128; ++i) w[16 + i] = static_cast<uint8_t>(i);
  std::vector<float> xf(256);
  for (int i = 0; i < 256; ++i) xf[i] = float(((7 * i) % 23) - 11) * 0.05f;
  BlockQ8_K xq;
  ref::quantize_row(GgmlType::Q8_K, xf.data(), &xq, 256);
  for (int rb : {2, 8}) {
    Expected<PackedWeights> p = pack_weights(GgmlType::Q4_K, rb, w.data(), w.size(), 1, 256);
    ASSERT_TRUE(p.has_value()) << p.error();
    float y = 0.0f;
    ASSERT_TRUE(gemv_packed_ref(p->layout, p->data.get(), &xq, &y, 0, 1).is_ok());
    EXPECT_NEAR(y, -358.327148f, 2e-4f);
    EXPECT_FLOAT_EQ(y, ref::vec_dot_row(GgmlType::Q4_K, w.data(), &xq, 256));
  }
}

TEST(PackQ4K, LayoutGeometry) {
  Expected<PackLayout> L = pack_layout(GgmlType::Q4_K, 8, 13, 7168);
  ASSERT_TRUE(L.has_value());
  EXPECT_EQ(L->groups, 2);
  EXPECT_EQ(L->group_stride, 28 * 8 * 144);  // as many bytes as the GGUF rows, a multiple of 64
  EXPECT_EQ(L->group_stride % 64, 0);
  EXPECT_EQ(L->total_bytes, 2 * L->group_stride);
  L = pack_layout(GgmlType::Q4_K, 6, 7, 256);
  ASSERT_TRUE(L.has_value());
  EXPECT_EQ(L->group_stride, (6 * 144 + 63) / 64 * 64);
}

TEST(PackQ4K, PaddingRowsAreZero) {
  std::vector<uint8_t> w(3 * sizeof(BlockQ4_K), 0xA5);
  Expected<PackedWeights> p = pack_weights(GgmlType::Q4_K, 4, w.data(), w.size(), 3, 256);
  ASSERT_TRUE(p.has_value());
  // Row 3 (the fourth of the group) is padding: its codes nibbles, scales and d are zero.
  const uint8_t* g = p->group(0);
  for (int c = 0; c < 4; ++c)
    for (int s = 0; s < 8; ++s)
      for (int t = 0; t < 4; ++t) EXPECT_EQ(g[256 + 64 * c + 4 * (2 * s + 1) + t], 0);
  const uint16_t* d = reinterpret_cast<const uint16_t*>(g + 4 * 140);
  EXPECT_EQ(d[3], 0);
  EXPECT_EQ(d[4 + 3], 0);
}

TEST(PackQ4K, Errors) {
  std::vector<uint8_t> w(2 * sizeof(BlockQ4_K));
  Expected<PackedWeights> p = pack_weights(GgmlType::Q4_K, 8, w.data(), w.size() - 1, 1, 512);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().find("bytes"), std::string::npos) << p.error();
  EXPECT_FALSE(pack_weights(GgmlType::Q4_K, 3, w.data(), w.size(), 1, 512).has_value());
  EXPECT_FALSE(pack_weights(GgmlType::Q4_K, 8, w.data(), w.size(), 1, 300).has_value());
  EXPECT_FALSE(pack_weights(GgmlType::IQ4_XS, 8, w.data(), w.size(), 1, 256).has_value());
  EXPECT_FALSE(pack_weights(GgmlType::Q4_K, 8, nullptr, 0, 1, 256).has_value());
  Expected<PackLayout> L = pack_layout(GgmlType::Q4_K, 8, 4, 256);
  ASSERT_TRUE(L.has_value());
  float y[4];
  EXPECT_FALSE(gemv_packed_ref(*L, nullptr, nullptr, y, 0, 5).is_ok());
}

// Spec §2.3 Q5_0 example block: 352-byte records (22 bytes a row, as in the GGUF), the fifth
// bits where the kernels take them, and packed reference == reference.
TEST(PackRows16, Q5_0SpecBlock) {
  const uint8_t blk[22] = {0x00, 0x38, 0x5a, 0xa5, 0xf0, 0xf0, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4,
                           0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
  EXPECT_EQ(rows16_record_bytes(GgmlType::Q5_0), 352);
  std::vector<float> xf(32), want(32);
  ref::dequantize_row(GgmlType::Q5_0, blk, want.data(), 32);
  EXPECT_EQ(want[0], -8.0f);
  EXPECT_EQ(want[16], -0.5f);
  for (int i = 0; i < 32; ++i) xf[i] = float(i % 5) - 2.0f;
  BlockQ8_0 xq;
  ref::quantize_row(GgmlType::Q8_0, xf.data(), &xq, 32);
  Expected<PackedWeights> p = pack_weights(GgmlType::Q5_0, 16, blk, sizeof blk, 1, 32);
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->layout.group_stride, 384);  // one record, rounded up to a cache line
  // Row 0's fifth bits: bit c of byte t is weight 4c+t's, bit 4+c weight 16+4c+t's.
  const uint32_t qh = 0xF0F0A55A;
  for (int t = 0; t < 4; ++t) {
    int byte = 0;
    for (int c = 0; c < 4; ++c)
      byte |= int((qh >> (4 * c + t)) & 1) << c | int((qh >> (16 + 4 * c + t)) & 1) << (4 + c);
    EXPECT_EQ(p->group(0)[kQ5_0FifthBits + t], byte) << t;
  }
  float y = 0.0f;
  ASSERT_TRUE(gemv_packed_ref(p->layout, p->data.get(), &xq, &y, 0, 1).is_ok());
  EXPECT_EQ(y, ref::vec_dot_row(GgmlType::Q5_0, blk, &xq, 32));
}

}  // namespace
}  // namespace zenmoe

namespace zenmoe {
namespace {

TEST(PackRows16, RowBlockMustBe16AndRowsAreLanes) {
  std::vector<uint8_t> w(3 * 64 * 4);
  EXPECT_FALSE(pack_layout(GgmlType::F32, 8, 3, 64).has_value());
  Expected<PackLayout> L = pack_layout(GgmlType::Q8_0, 16, 17, 64);
  ASSERT_TRUE(L.has_value());
  EXPECT_EQ(L->groups, 2);
  EXPECT_EQ(L->group_stride, 2 * 544);
  // F32 row r element k sits at group (r/16), offset (k*16 + r%16)*4.
  std::vector<float> rows(3 * 64);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i);
  Expected<PackedWeights> p = pack_weights(GgmlType::F32, 16, rows.data(), rows.size() * 4, 3, 64);
  ASSERT_TRUE(p.has_value()) << p.error();
  const float* g = reinterpret_cast<const float*>(p->group(0));
  EXPECT_EQ(g[5 * 16 + 2], rows[2 * 64 + 5]);
  EXPECT_EQ(g[5 * 16 + 3], 0.0f);  // padding row
}

// Q8_0 and Q4_0 groups are one record per block: the block's codes, then the 16 rows' d.
// An even block's record: codes, then d; an odd block's: d, then codes, so that every code
// chunk is one aligned cache line (544 = 8.5 lines, 288 = 4.5).
TEST(PackRows16, QuantRecordsAlternateCodesAndScales) {
  constexpr int kRows = 17, kBlocks = 3;
  std::vector<BlockQ8_0> q8(kRows * kBlocks);
  std::vector<BlockQ4_0> q4(kRows * kBlocks);
  for (int i = 0; i < kRows * kBlocks; ++i) {
    q8[i].d = q4[i].d = static_cast<uint16_t>(0x3C00 + i);
    for (int j = 0; j < 32; ++j) q8[i].qs[j] = static_cast<int8_t>(i * 7 + j * 3 - 60);
    for (int j = 0; j < 16; ++j) q4[i].qs[j] = static_cast<uint8_t>(i * 11 + j * 5);
  }
  Expected<PackedWeights> p8 = pack_weights(GgmlType::Q8_0, 16, q8.data(), q8.size() * sizeof(BlockQ8_0), kRows, 96);
  Expected<PackedWeights> p4 = pack_weights(GgmlType::Q4_0, 16, q4.data(), q4.size() * sizeof(BlockQ4_0), kRows, 96);
  ASSERT_TRUE(p8.has_value()) << p8.error();
  ASSERT_TRUE(p4.has_value()) << p4.error();
  EXPECT_EQ(rows16_record_bytes(GgmlType::Q8_0), 544);
  EXPECT_EQ(rows16_record_bytes(GgmlType::Q4_0), 288);
  for (int r : {0, 3, 15, 16})
    for (int b = 0; b < kBlocks; ++b) {
      const int i = r % 16;
      const bool odd = b % 2 == 1;
      const BlockQ8_0& s8 = q8[r * kBlocks + b];
      const uint8_t* g8 = p8->group(r / 16) + b * 544;
      const uint8_t* c8 = g8 + (odd ? 32 : 0);
      EXPECT_EQ((c8 - p8->group(r / 16)) % 64, 0);
      for (int j = 0; j < 32; ++j) EXPECT_EQ(c8[64 * (j / 4) + 4 * i + j % 4], uint8_t(s8.qs[j] ^ 0x80)) << r << " " << b;
      uint16_t d = 0;
      std::memcpy(&d, g8 + (odd ? 0 : 512) + 2 * i, 2);
      EXPECT_EQ(d, s8.d);
      const BlockQ4_0& s4 = q4[r * kBlocks + b];
      const uint8_t* g4 = p4->group(r / 16) + b * 288;
      const uint8_t* c4 = g4 + (odd ? 32 : 0);
      EXPECT_EQ((c4 - p4->group(r / 16)) % 64, 0);
      for (int c = 0; c < 4; ++c)
        for (int t = 0; t < 4; ++t) {
          const uint8_t src = s4.qs[4 * c + t];
          EXPECT_EQ(c4[64 * c + 4 * i + t], uint8_t((src & 0x0F) | (src >> 4) << 4));
        }
      std::memcpy(&d, g4 + (odd ? 0 : 256) + 2 * i, 2);
      EXPECT_EQ(d, s4.d);
    }
}

// Q6_K, spec §2.8 layout inverted: the block whose weight w has the 6-bit code codes[w].
BlockQ6_K q6k_block(const int* codes) {
  BlockQ6_K b{};
  for (int w = 0; w < 256; ++w) {
    const int h = w / 128, r = w % 128, quarter = r / 32, l = r % 32, c = codes[w];
    b.ql[64 * h + l + 32 * (quarter & 1)] |= uint8_t(quarter < 2 ? c & 15 : (c & 15) << 4);
    b.qh[32 * h + l] |= uint8_t((c >> 4) << (2 * quarter));
  }
  return b;
}

// A Q6_K sub-block's three chunks hold its first 12 codes in bits 0-5 and the last 4 codes'
// bit pairs in bits 6-7 (chunk m: bits 2m, 2m+1). Each quarter of the record (832 bytes) holds
// the scales of its four sub-blocks (one line), then their chunks; d follows at 3328.
TEST(PackQ6K, ThreeChunksPerSubBlockCarryTheLastCodesInTheirTopBits) {
  constexpr int kRows = 17, kSuper = 2;
  std::vector<BlockQ6_K> w(kRows * kSuper);
  std::vector<int> codes(256);
  for (int i = 0; i < kRows * kSuper; ++i) {
    for (int c = 0; c < 256; ++c) codes[c] = (c * 37 + i * 11 + (c >> 3)) & 63;
    w[i] = q6k_block(codes.data());
    for (int s = 0; s < 16; ++s) w[i].scales[s] = static_cast<int8_t>(s * 9 - i - 60);
    w[i].d = static_cast<uint16_t>(0x3C00 + i);
  }
  Expected<PackedWeights> p = pack_weights(GgmlType::Q6_K, 16, w.data(), w.size() * sizeof(BlockQ6_K), kRows, 512);
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->layout.group_stride, kSuper * 3392);
  for (int r : {0, 5, 15, 16})
    for (int sb = 0; sb < kSuper; ++sb) {
      const int n = r * kSuper + sb, i = r % 16;
      const uint8_t* rec = p->group(r / 16) + sb * 3392;
      for (int c = 0; c < 256; ++c) codes[c] = (c * 37 + n * 11 + (c >> 3)) & 63;
      for (int s = 0; s < 16; ++s) {
        for (int m = 0; m < 3; ++m)
          for (int t = 0; t < 4; ++t) {
            const int last = codes[16 * s + 12 + t];
            const uint8_t want = uint8_t(codes[16 * s + 4 * m + t] | ((last >> (2 * m)) & 3) << 6);
            const int chunk = 832 * (s / 4) + 64 + 192 * (s % 4) + 64 * m;
            EXPECT_EQ(rec[chunk + 4 * i + t], want) << r << " " << sb << " " << s << " " << m;
            EXPECT_EQ(q6k_chunk_offset(s, m), chunk);
          }
        EXPECT_EQ(int8_t(rec[832 * (s / 4) + 16 * (s % 4) + i]), w[n].scales[s]);
      }
      uint16_t d = 0;
      std::memcpy(&d, rec + 3328 + 2 * i, 2);
      EXPECT_EQ(d, w[n].d);
    }
}

// Q5_K, spec §2.7 layout inverted: the block whose weight w has the 5-bit code codes[w].
BlockQ5_K q5k_block(const int* codes) {
  BlockQ5_K b{};
  for (int w = 0; w < 256; ++w) {
    const int s = w / 32, l = w % 32, c = codes[w];
    b.qs[32 * (s / 2) + l] |= uint8_t((c & 15) << (4 * (s & 1)));
    b.qh[l] |= uint8_t((c >> 4) << s);
  }
  return b;
}

// A Q5_K sub-block's five chunks hold its first 20 codes in bits 0-4; their top bits, three
// per chunk in order, hold the last 12 codes (5 bits each, 4 weights per code dword).
TEST(PackQ5K, FiveChunksPerSubBlockCarryTheLastCodesInTheirTopBits) {
  constexpr int kRows = 17, kSuper = 2;
  std::vector<BlockQ5_K> w(kRows * kSuper);
  std::vector<int> codes(256);
  const auto make_codes = [&](int n) {
    for (int c = 0; c < 256; ++c) codes[c] = (c * 29 + n * 13 + (c >> 4)) & 31;
  };
  for (int n = 0; n < kRows * kSuper; ++n) {
    make_codes(n);
    w[n] = q5k_block(codes.data());
    for (int i = 0; i < 12; ++i) w[n].scales[i] = static_cast<uint8_t>(n * 5 + i * 17);
    w[n].d = static_cast<uint16_t>(0x3C00 + n);
    w[n].dmin = static_cast<uint16_t>(0x3800 + n);
  }
  Expected<PackedWeights> p = pack_weights(GgmlType::Q5_K, 16, w.data(), w.size() * sizeof(BlockQ5_K), kRows, 512);
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->layout.group_stride, kSuper * 2880);
  for (int r : {0, 6, 15, 16})
    for (int sb = 0; sb < kSuper; ++sb) {
      const int n = r * kSuper + sb, i = r % 16;
      const uint8_t* rec = p->group(r / 16) + sb * 2880;
      make_codes(n);
      for (int s = 0; s < 8; ++s)
        for (int t = 0; t < 4; ++t) {
          int top = 0;
          for (int m = 0; m < 5; ++m) {
            const uint8_t byte = rec[320 * s + 64 * m + 4 * i + t];
            EXPECT_EQ(q5k_chunk_offset(s, m), 320 * s + 64 * m);
            EXPECT_EQ(byte & 31, codes[32 * s + 4 * m + t]) << r << " " << sb << " " << s << " " << m;
            top |= (byte >> 5) << (3 * m);
          }
          for (int k = 0; k < 3; ++k)
            EXPECT_EQ((top >> (5 * k)) & 31, codes[32 * s + 20 + 4 * k + t]) << r << " " << sb << " " << s << " " << k;
        }
      for (int s = 0; s < 8; ++s) {
        uint8_t sc = 0, mn = 0;
        ref::kscale_get(w[n].scales, s, &sc, &mn);
        EXPECT_EQ(rec[2560 + 16 * s + i], sc) << r << " " << sb << " " << s;
        EXPECT_EQ(rec[2688 + 16 * s + i], mn) << r << " " << sb << " " << s;
      }
      uint16_t d = 0, dmin = 0;
      std::memcpy(&d, rec + 2816 + 2 * i, 2);
      std::memcpy(&dmin, rec + 2848 + 2 * i, 2);
      EXPECT_EQ(d, w[n].d);
      EXPECT_EQ(dmin, w[n].dmin);
    }
}

// Spec §2.2 Q4_0 example block dotted with Q8_0 activations: packed reference == reference.
TEST(PackRows16, Q4_0SpecBlock) {
  const uint8_t blk[18] = {0x00, 0x38, 0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7,
                           0x08, 0x19, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f};
  std::vector<float> xf(32);
  for (int i = 0; i < 32; ++i) xf[i] = float(i % 5) - 2.0f;
  BlockQ8_0 xq;
  ref::quantize_row(GgmlType::Q8_0, xf.data(), &xq, 32);
  Expected<PackedWeights> p = pack_weights(GgmlType::Q4_0, 16, blk, sizeof blk, 1, 32);
  ASSERT_TRUE(p.has_value());
  float y = 0.0f;
  ASSERT_TRUE(gemv_packed_ref(p->layout, p->data.get(), &xq, &y, 0, 1).is_ok());
  EXPECT_EQ(y, ref::vec_dot_row(GgmlType::Q4_0, blk, &xq, 32));
}

}  // namespace
}  // namespace zenmoe
