// IEEE binary16 and bfloat16 conversions used by every reference kernel (spec §2 general rules).
// Pure integer bit manipulation, so the results do not depend on the compiler, the rounding
// mode or the host's F16C support.
#pragma once

#include <bit>
#include <cstdint>

#include "kernels/formats.h"

namespace zenmoe::ref {

// binary16 -> binary32, exact for every input (subnormals, infinities, NaN payloads).
// Written with selects instead of branches so row loops vectorise.
inline float fp16_to_fp32(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;
  // Normal numbers: move exponent+mantissa into place and rebias by 127 - 15.
  uint32_t bits = (em << 13) + 0x38000000u;
  // Inf / NaN: the exponent must become all ones (rebias once more).
  bits = em >= 0x7C00u ? bits + 0x38000000u : bits;
  // Zero / subnormal: em * 2^-24 is exact in binary32.
  const float sub = static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f;
  bits = em < 0x0400u ? std::bit_cast<uint32_t>(sub) : bits;
  return std::bit_cast<float>(bits | sign);
}

// binary32 -> binary16, round to nearest even, like the x86 `vcvtps2ph` instruction with
// rounding mode 0 (what ggml's F16C path uses): overflow to ±inf, correct subnormals,
// NaN stays NaN with the quiet bit set and the top 10 payload bits kept.
inline f16_t fp32_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t x = bits & 0x7FFFFFFFu;
  if (x >= 0x7F800000u) {  // inf or NaN
    if (x == 0x7F800000u) return sign | 0x7C00u;
    return static_cast<f16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu));
  }
  // 65520 (0x477FF000) is halfway between 65504 (odd mantissa) and 2^16: ties go up to inf.
  if (x >= 0x477FF000u) return sign | 0x7C00u;
  const uint32_t e = x >> 23;
  if (e < 113) {  // below 2^-14: f16 subnormal, unit 2^-24
    if (e < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;  // may carry into the smallest normal
    return static_cast<f16_t>(sign | q);
  }
  uint32_t h = ((e - 112) << 10) | ((x >> 13) & 0x3FFu);
  const uint32_t rem = x & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // carry into the exponent is correct
  return static_cast<f16_t>(sign | h);
}

// bfloat16 -> binary32: the 16 bits are the upper half.
inline float bf16_to_fp32(bf16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// binary32 -> bfloat16 exactly as ggml does it: NaN -> quiet NaN (top bits | 0x40), otherwise
// round to nearest even (overflow rounds to inf naturally).
inline bf16_t fp32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<bf16_t>((bits >> 16) | 0x40u);
  return static_cast<bf16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Row helpers.
inline void fp16_to_fp32_row(const f16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}
inline void fp32_to_fp16_row(const float* src, f16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
inline void bf16_to_fp32_row(const bf16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}
inline void fp32_to_bf16_row(const float* src, bf16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

}  // namespace zenmoe::ref
