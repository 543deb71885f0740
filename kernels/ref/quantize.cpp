// Reference quantisers of the 32-element formats (Q4_0, Q5_0, Q8_0) and of the Q8_K
// activation format. Q8_0 and Q8_K follow ggml's reference path bit for bit (spec §2.4, §2.9).
#include <cmath>
#include <cstring>

#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"
#include "kernels/ref/rounding.h"

namespace zenmoe::ref {
namespace {

template <class Block>
Block* blocks(void* p) { return static_cast<Block*>(p); }

// Signed value of largest magnitude (the first one reaching it) and its magnitude.
void signed_amax(const float* x, int n, float* max, float* amax) {
  *max = 0.0f;
  *amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > *amax) {
      *amax = ax;
      *max = x[j];
    }
  }
}

}  // namespace

void from_float_q8_0(const float* x, void* dst, int64_t n) {
  BlockQ8_0* b = blocks<BlockQ8_0>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      const float ax = std::fabs(x[j]);
      amax = amax > ax ? amax : ax;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void from_float_q8_0_x86(const float* x, void* dst, int64_t n) {
  BlockQ8_0* b = blocks<BlockQ8_0>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      const float ax = std::fabs(x[j]);
      amax = amax > ax ? amax : ax;
    }
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    b[i].d = fp32_to_fp16(amax / 127.0f);
    // nearest_int is round-half-even independent of the FP environment; |x*id| <= 127.
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
  }
}

void from_float_q8_K(const float* x, void* dst, int64_t n) {
  BlockQ8_K* b = blocks<BlockQ8_K>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max, amax;
    signed_amax(x, kQK_K, &max, &amax);
    if (amax == 0.0f) {
      std::memset(&b[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // Scaling by -127/max maps the largest-magnitude value to exactly -127, so d is
    // negative when that value is positive (spec §2.9).
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      b[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += b[i].qs[16 * g + k];
      b[i].bsums[g] = static_cast<int16_t>(sum);
    }
    b[i].d = 1.0f / iscale;
  }
}

void from_float_q4_0(const float* x, void* dst, int64_t n) {
  BlockQ4_0* b = blocks<BlockQ4_0>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float max, amax;
    signed_amax(x, kQK, &max, &amax);
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // x*id lies in [-8, 8]; adding 8.5 and truncating rounds half up to a code in 0..16.
      const int q0 = static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f));
      const int q1 = static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f));
      b[i].qs[j] = static_cast<uint8_t>((q0 < 15 ? q0 : 15) | ((q1 < 15 ? q1 : 15) << 4));
    }
  }
}

void from_float_q5_0(const float* x, void* dst, int64_t n) {
  BlockQ5_0* b = blocks<BlockQ5_0>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float max, amax;
    signed_amax(x, kQK, &max, &amax);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f));
      int q1 = static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f));
      q0 = q0 < 31 ? q0 : 31;
      q1 = q1 < 31 ? q1 : 31;
      b[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(b[i].qh, &qh, 4);
  }
}

}  // namespace zenmoe::ref
