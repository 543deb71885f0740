#include "kernels/pack_q6k.h"

#include <cstring>

#include "kernels/ref/fp16.h"

namespace zenmoe::pack_detail {
namespace {

constexpr int64_t R = 16;

constexpr int64_t kRecord = 3392;  // one super-block's bytes (kernels/pack.h)

// The 6-bit code (0..63, bias 32 not removed) of weight w of a GGUF Q6_K block (spec §2.8).
int q6k_code(const BlockQ6_K& b, int w) {
  const int h = w / 128, r = w % 128, quarter = r / 32, l = r % 32;
  const uint8_t lo_byte = b.ql[64 * h + l + 32 * (quarter & 1)];
  const int lo = quarter < 2 ? (lo_byte & 0x0F) : (lo_byte >> 4);
  const int hi = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
  return lo | (hi << 4);
}

// Row i of a super-block into its record `rec` (offsets: kernels/pack.h).
void pack_block(const BlockQ6_K& b, int64_t i, uint8_t* rec) {
  for (int s = 0; s < 16; ++s)
    for (int m = 0; m < 3; ++m)
      for (int t = 0; t < 4; ++t) {
        const int own = q6k_code(b, 16 * s + 4 * m + t), last = q6k_code(b, 16 * s + 12 + t);
        rec[q6k_chunk_offset(s, m) + 4 * i + t] = uint8_t(own | ((last >> (2 * m)) & 3) << 6);
      }
  for (int s = 0; s < 16; ++s) rec[q6k_scale_offset(s) + i] = static_cast<uint8_t>(b.scales[s]);
  std::memcpy(rec + kQ6KDOffset + i * 2, &b.d, 2);
}

int packed_code(const uint8_t* rec, int64_t i, int w) {
  const int s = w / 16, m = (w % 16) / 4, t = w % 4;
  const auto byte = [&](int chunk) { return int(rec[q6k_chunk_offset(s, chunk) + 4 * i + t]); };
  if (m < 3) return byte(m) & 0x3F;
  return (byte(0) >> 6) | (byte(1) >> 6) << 2 | (byte(2) >> 6) << 4;
}

}  // namespace

int64_t q6k_group_bytes(int64_t cols) { return cols / kQK_K * kRecord; }

void q6k_pack(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  const int64_t nsb = L.cols / kQK_K;
  for (int64_t r = 0; r < L.rows; ++r)
    for (int64_t sb = 0; sb < nsb; ++sb) {
      BlockQ6_K b;
      std::memcpy(&b, src + (r * nsb + sb) * sizeof b, sizeof b);
      pack_block(b, r % R, dst + (r / R) * L.group_stride + sb * kRecord);
    }
}

float q6k_dot(const PackLayout& L, const uint8_t* g, int64_t i, const BlockQ8_K* x) {
  const int64_t nsb = L.cols / kQK_K;
  float sum = 0.0f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* rec = g + sb * kRecord;
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t part = 0;
      for (int w = 16 * s; w < 16 * s + 16; ++w) part += (packed_code(rec, i, w) - 32) * x[sb].qs[w];
      isum += int8_t(rec[q6k_scale_offset(s) + i]) * part;
    }
    uint16_t d;
    std::memcpy(&d, rec + kQ6KDOffset + i * 2, 2);
    sum += (ref::fp16_to_fp32(d) * x[sb].d) * float(isum);
  }
  return sum;
}

}  // namespace zenmoe::pack_detail
