#include "kernels/pack_q6k.h"

#include <cstring>

#include "kernels/ref/fp16.h"

namespace zenmoe::pack_detail {
namespace {

constexpr int64_t R = 16;

constexpr int64_t kRecord = 3392;  // one super-block's bytes (kernels/pack.h)

struct Q6KRegions {
  int64_t codes, scales, d;  // starts of super-block sb's regions inside a group
};

Q6KRegions regions(int64_t sb) {
  const int64_t rec = sb * kRecord;
  return {rec, rec + 3072, rec + 3328};
}

// The 6-bit code (0..63, bias 32 not removed) of weight w of a GGUF Q6_K block (spec §2.8).
int q6k_code(const BlockQ6_K& b, int w) {
  const int h = w / 128, r = w % 128, quarter = r / 32, l = r % 32;
  const uint8_t lo_byte = b.ql[64 * h + l + 32 * (quarter & 1)];
  const int lo = quarter < 2 ? (lo_byte & 0x0F) : (lo_byte >> 4);
  const int hi = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
  return lo | (hi << 4);
}

void pack_block(const BlockQ6_K& b, int64_t sb, int64_t i, uint8_t* g) {
  const Q6KRegions o = regions(sb);
  for (int s = 0; s < 8; ++s)
    for (int j = 0; j < 4; ++j)
      for (int t = 0; t < 4; ++t) {
        const int a = q6k_code(b, 16 * s + 4 * j + t), c = q6k_code(b, 16 * (s + 8) + 4 * j + t);
        g[o.codes + q6k_nibble_offset(s, j) + 4 * i + t] = uint8_t((a & 0x0F) | ((c & 0x0F) << 4));
      }
  for (int s = 0; s < 4; ++s)
    for (int j = 0; j < 4; ++j)
      for (int t = 0; t < 4; ++t) {
        uint8_t v = 0;
        for (int k = 0; k < 4; ++k) v |= uint8_t((q6k_code(b, 16 * (s + 4 * k) + 4 * j + t) >> 4) << (2 * k));
        g[o.codes + q6k_high_offset(s, j) + 4 * i + t] = v;
      }
  for (int s = 0; s < 16; ++s) g[o.scales + 16 * s + i] = static_cast<uint8_t>(b.scales[s]);
  std::memcpy(g + o.d + i * 2, &b.d, 2);
}

int packed_code(const uint8_t* g, const Q6KRegions& o, int64_t i, int w) {
  const int s = w / 16, j = (w % 16) / 4, t = w % 4;
  const uint8_t lo = g[o.codes + q6k_nibble_offset(s % 8, j) + 4 * i + t];
  const uint8_t hi = g[o.codes + q6k_high_offset(s % 4, j) + 4 * i + t];
  const int low = s < 8 ? (lo & 0x0F) : (lo >> 4);
  return low | (((hi >> (2 * (s / 4))) & 3) << 4);
}

}  // namespace

int64_t q6k_group_bytes(int64_t cols) { return cols / kQK_K * kRecord; }

void q6k_pack(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  const int64_t nsb = L.cols / kQK_K;
  for (int64_t r = 0; r < L.rows; ++r)
    for (int64_t sb = 0; sb < nsb; ++sb) {
      BlockQ6_K b;
      std::memcpy(&b, src + (r * nsb + sb) * sizeof b, sizeof b);
      pack_block(b, sb, r % R, dst + (r / R) * L.group_stride);
    }
}

float q6k_dot(const PackLayout& L, const uint8_t* g, int64_t i, const BlockQ8_K* x) {
  const int64_t nsb = L.cols / kQK_K;
  float sum = 0.0f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const Q6KRegions o = regions(sb);
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t part = 0;
      for (int w = 16 * s; w < 16 * s + 16; ++w) part += (packed_code(g, o, i, w) - 32) * x[sb].qs[w];
      isum += int8_t(g[o.scales + 16 * s + i]) * part;
    }
    uint16_t d;
    std::memcpy(&d, g + o.d + i * 2, 2);
    sum += (ref::fp16_to_fp32(d) * x[sb].d) * float(isum);
  }
  return sum;
}

}  // namespace zenmoe::pack_detail
