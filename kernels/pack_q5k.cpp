// Q5_K packer and the scalar reference of its packed layout (kernels/pack.h). Each
// super-block of a 16-row group is one contiguous 2880-byte record, so the kernel streams a
// single address range and prefetches it with one distance.
#include "kernels/pack_q5k.h"

#include <cstring>

#include "kernels/ref/fp16.h"
#include "kernels/ref/kscales.h"

namespace zenmoe::pack_detail {
namespace {

constexpr int64_t R = 16;
// Offsets inside one super-block record.
constexpr int64_t kSc = 2560, kMin = 2688, kD = 2816, kDmin = 2848;

// The 5-bit code (0..31) of weight w of a GGUF Q5_K block (spec §2.7): low nibble from qs
// (sub-block pairs share bytes), fifth bit s of qh[w % 32].
int q5k_code(const BlockQ5_K& b, int w) {
  const int s = w / 32, l = w % 32;
  const int lo = (b.qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 0x0F;
  return lo | (((b.qh[l] >> s) & 1) << 4);
}

void pack_block(const BlockQ5_K& b, int64_t i, uint8_t* rec) {
  for (int s = 0; s < 8; ++s)
    for (int t = 0; t < 4; ++t) {
      const int e = q5k_code(b, 32 * s + 20 + t) | q5k_code(b, 32 * s + 24 + t) << 5 | q5k_code(b, 32 * s + 28 + t) << 10;
      for (int m = 0; m < 5; ++m)
        rec[q5k_chunk_offset(s, m) + 4 * i + t] = uint8_t(q5k_code(b, 32 * s + 4 * m + t) | ((e >> (3 * m)) & 7) << 5);
    }
  for (int s = 0; s < 8; ++s) ref::kscale_get(b.scales, s, &rec[kSc + 16 * s + i], &rec[kMin + 16 * s + i]);
  std::memcpy(rec + kD + 2 * i, &b.d, 2);
  std::memcpy(rec + kDmin + 2 * i, &b.dmin, 2);
}

int packed_code(const uint8_t* rec, int64_t i, int w) {
  const int s = w / 32, m = (w % 32) / 4, t = w % 4;
  if (m < 5) return rec[q5k_chunk_offset(s, m) + 4 * i + t] & 0x1F;
  int e = 0;
  for (int k = 0; k < 5; ++k) e |= (rec[q5k_chunk_offset(s, k) + 4 * i + t] >> 5) << (3 * k);
  return (e >> (5 * (m - 5))) & 0x1F;
}

}  // namespace

int64_t q5k_group_bytes(int64_t cols) { return cols / kQK_K * kQ5KSuperBlockBytes; }

void q5k_pack(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  const int64_t nsb = L.cols / kQK_K;
  for (int64_t r = 0; r < L.rows; ++r)
    for (int64_t sb = 0; sb < nsb; ++sb) {
      BlockQ5_K b;
      std::memcpy(&b, src + (r * nsb + sb) * sizeof b, sizeof b);
      pack_block(b, r % R, dst + (r / R) * L.group_stride + sb * kQ5KSuperBlockBytes);
    }
}

// Integer sums as the reference vec_dot_q5_K; floats per super-block:
// sum += (d * d8) * Σ_s sc[s] * isum[s] - (dmin * d8) * Σ_s m[s] * (bsums[2s] + bsums[2s+1]).
float q5k_dot(const PackLayout& L, const uint8_t* g, int64_t i, const BlockQ8_K* x) {
  const int64_t nsb = L.cols / kQK_K;
  float sum = 0.0f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* rec = g + sb * kQ5KSuperBlockBytes;
    int32_t sumi_s = 0, sumi_m = 0;
    for (int s = 0; s < 8; ++s) {
      int32_t isum = 0;
      for (int w = 32 * s; w < 32 * s + 32; ++w) isum += packed_code(rec, i, w) * x[sb].qs[w];
      sumi_s += rec[kSc + 16 * s + i] * isum;
      sumi_m += rec[kMin + 16 * s + i] * (x[sb].bsums[2 * s] + x[sb].bsums[2 * s + 1]);
    }
    uint16_t d, dmin;
    std::memcpy(&d, rec + kD + 2 * i, 2);
    std::memcpy(&dmin, rec + kDmin + 2 * i, 2);
    sum += (ref::fp16_to_fp32(d) * x[sb].d) * float(sumi_s) - (ref::fp16_to_fp32(dmin) * x[sb].d) * float(sumi_m);
  }
  return sum;
}

}  // namespace zenmoe::pack_detail
