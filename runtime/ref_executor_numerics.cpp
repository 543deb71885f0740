#include "runtime/ref_executor_numerics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/kscales.h"

namespace zenmoe::refexec {

float ggml_expf(float x) {
  // n = round(x / ln2) by the 1.5*2^23 trick, b = x - n*ln2 in two parts, exp(b) by a
  // polynomial evaluated with fused multiply-adds, then scaled by 2^n.
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(
      std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
      u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : std::numeric_limits<float>::infinity();
  return std::ldexp(j, static_cast<int>(n));
}

void swiglu_ggml(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = g / (1.0f + ggml_expf(0.0f - g));
    y[i] = s * up[i];
  }
}

namespace {

// _mm512_reduce_add_ps: halves added pairwise (16 -> 8 -> 4 -> 2 -> 1).
float reduce16(const float* v) {
  float a[8], b[4];
  for (int i = 0; i < 8; ++i) a[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) b[i] = a[i + 4] + a[i];
  const float c0 = b[0] + b[2], c1 = b[1] + b[3];
  return c0 + c1;
}

}  // namespace

void softmax_ggml(const float* x, float* y, int64_t n, float scale) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    y[i] = x[i] * scale;
    mx = std::max(mx, y[i]);
  }
  double sum = 0.0;
  float chunk[16];
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    for (int64_t k = 0; k < 16; ++k) {
      const int64_t i = i0 + k;
      chunk[k] = i < n ? ggml_expf(y[i] - mx) : 0.0f;  // masked cells contribute exact zeros
      if (i < n) y[i] = chunk[k];
    }
    sum += static_cast<double>(reduce16(chunk));
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

namespace {

// hsum of 8 lanes as ggml's x86 code does it: (hi4 + lo4), then pairs, then the last two.
float hsum8(const float* a) {
  float r[4];
  for (int i = 0; i < 4; ++i) r[i] = a[i + 4] + a[i];
  return (r[0] + r[2]) + (r[1] + r[3]);
}

}  // namespace

float dot_q4_K_x86(const void* w, const void* xq, int64_t n) {
  const BlockQ4_K* a = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(xq);
  float acc[8] = {}, acc_m[4] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) ref::kscale_get(a[i].scales, j, &sc[j], &mn[j]);
    int32_t sumi[8] = {};
    for (int j = 0; j < 4; ++j)
      for (int half = 0; half < 2; ++half) {
        const int sub = 2 * j + half;
        for (int l = 0; l < 32; ++l) {
          const int q4 = half ? a[i].qs[32 * j + l] >> 4 : a[i].qs[32 * j + l] & 0x0F;
          sumi[l / 4] += sc[sub] * q4 * b[i].qs[32 * sub + l];
        }
      }
    int32_t prod[4];
    for (int m = 0; m < 4; ++m) {
      const int s0 = b[i].bsums[4 * m] + b[i].bsums[4 * m + 1];
      const int s1 = b[i].bsums[4 * m + 2] + b[i].bsums[4 * m + 3];
      prod[m] = mn[2 * m] * s0 + mn[2 * m + 1] * s1;
    }
    const float d = b[i].d * ref::fp16_to_fp32(a[i].d);
    const float dmin = -b[i].d * ref::fp16_to_fp32(a[i].dmin);
    for (int m = 0; m < 4; ++m) acc_m[m] = std::fma(dmin, static_cast<float>(prod[m]), acc_m[m]);
    for (int m = 0; m < 8; ++m) acc[m] = std::fma(d, static_cast<float>(sumi[m]), acc[m]);
  }
  const float m0 = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
  return hsum8(acc) + m0;
}

namespace {

// Signed 5-bit / 4-bit / 8-bit quants of one 32-weight block.
void q5_0_values(const BlockQ5_0& b, int* q) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof qh);
  for (int j = 0; j < 16; ++j) {
    q[j] = ((b.qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
    q[j + 16] = ((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
  }
}

void q4_0_values(const BlockQ4_0& b, int* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = (b.qs[j] & 0x0F) - 8;
    q[j + 16] = (b.qs[j] >> 4) - 8;
  }
}

// Σ_blocks fma(d_w*d_x, lane sums of 4 consecutive products) over 8 lanes, then hsum8.
template <class Block, class Values>
float dot_q0_x86(const Block* a, const BlockQ8_0* b, int64_t nb, Values values) {
  float acc[8] = {};
  int q[32];
  for (int64_t i = 0; i < nb; ++i) {
    values(a[i], q);
    const float d = ref::fp16_to_fp32(a[i].d) * ref::fp16_to_fp32(b[i].d);
    for (int m = 0; m < 8; ++m) {
      int32_t s = 0;
      for (int k = 4 * m; k < 4 * m + 4; ++k) s += q[k] * b[i].qs[k];
      acc[m] = std::fma(d, static_cast<float>(s), acc[m]);
    }
  }
  return hsum8(acc);
}

}  // namespace

float dot_q8_0_family_x86(GgmlType t, const void* w, const void* xq, int64_t n) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(xq);
  const int64_t nb = n / kQK;
  switch (t) {
    case GgmlType::Q5_0:
      return dot_q0_x86(static_cast<const BlockQ5_0*>(w), x, nb, q5_0_values);
    case GgmlType::Q4_0:
      return dot_q0_x86(static_cast<const BlockQ4_0*>(w), x, nb, q4_0_values);
    default:
      return dot_q0_x86(static_cast<const BlockQ8_0*>(w), x, nb, [](const BlockQ8_0& b, int* q) {
        for (int k = 0; k < 32; ++k) q[k] = b.qs[k];
      });
  }
}

float dot_f16_fast(const void* w, const void* x, int64_t n) {
  // f16 -> f32 through a table built once from the exact conversion; same products and the
  // same sequential double sum as ref::vec_dot_f16, so the same bits, several times faster.
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = ref::fp16_to_fp32(static_cast<f16_t>(h));
    return t;
  }();
  const f16_t* a = static_cast<const f16_t*>(w);
  const f16_t* b = static_cast<const f16_t*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(table[a[i]] * table[b[i]]);
  return static_cast<float>(sum);
}

}  // namespace zenmoe::refexec
