// Reference quantisers of the K-quant weight formats Q4_K, Q5_K and Q6_K, following the
// algorithms of ggml's reference quantiser (no importance matrix):
//  * Q4_K / Q5_K: per 32-element sub-block an asymmetric fit y ≈ scale*q - min found by a
//    weighted least-squares search over candidate inverse scales (weights av|x| + |x|); the
//    8 scales and 8 mins are then quantised to 6 bits against the block maxima, and the
//    codes recomputed with the stored (rounded) scales.
//  * Q6_K: per 16-element group a symmetric fit searching inverse scales around nmax/max with
//    x² weights; the 16 group scales are quantised to int8 against the largest one.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ref/fp16.h"
#include "kernels/ref/kscales.h"
#include "kernels/ref/quant.h"
#include "kernels/ref/rounding.h"

namespace zenmoe::ref {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Weighted error of codes L under y = scale*L + min.
float fit_error(int n, const float* x, const float* w, const uint8_t* L, float scale, float min) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    err += w[i] * (diff * diff);
  }
  return err;
}

// Asymmetric fit x ≈ scale*L + min with L in 0..nmax and min <= 0. Starts from the plain
// min/max mapping, then tries inverse scales (nmax + rmin + rdelta*k)/(max - min) for
// k = 0..nstep, solving the weighted least-squares scale and min for each candidate code set
// and keeping the best. Returns the scale; *neg_min receives -min (>= 0).
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                    float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(clampi(nearest_int(iscale * (x[i] - min)), 0, nmax));
  float best_error = fit_error(n, x, w, L, scale, min);
  uint8_t aux[32];
  for (int k = 0; k <= nstep; ++k) {
    iscale = (rmin + rdelta * static_cast<float>(k) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {  // a positive offset is not representable: refit through zero
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float err = fit_error(n, x, w, aux, this_scale, this_min);
    if (err < best_error) {
      std::memcpy(L, aux, static_cast<size_t>(n));
      best_error = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// Symmetric fit x ≈ scale*(L - nmax) with x² weights: tries inverse scales
// -(nmax + 0.1k)/max for k = -9..9 and keeps the one maximising (Σwxl)²/Σwl², i.e. the
// smallest weighted squared error at the optimal scale. Codes L are stored offset by nmax.
float fit_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  auto sums = [&](float iscale, float* sumlx, float* suml2, bool store) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = static_cast<int8_t>(l + nmax);
      const float w = x[i] * x[i], fl = static_cast<float>(l);
      *sumlx += w * x[i] * fl;
      *suml2 += w * fl * fl;
    }
  };
  float sumlx, suml2;
  sums(static_cast<float>(-nmax) / max, &sumlx, &suml2, true);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    sums(iscale, &sumlx, &suml2, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      sums(iscale, &sumlx, &suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Fits the 8 sub-blocks of a Q4_K/Q5_K super-block, quantises scales and mins to 6 bits
// into S[12] and the super-scales, then recomputes the codes L (0..nmax) with the stored
// values. Returns d and dmin as f16 bits.
void fit_k_superblock(const float* x, int nmax, float rmin, int nstep, uint8_t* L, uint8_t* S,
                      f16_t* d_out, f16_t* dmin_out) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(clampi(nearest_int(inv_scale * scales[j]), 0, 63));
    m[j] = static_cast<uint8_t>(clampi(nearest_int(inv_min * mins[j]), 0, 63));
  }
  kscale_pack(sc, m, S);
  *d_out = fp32_to_fp16(max_scale / 63.0f);
  *dmin_out = fp32_to_fp16(max_min / 63.0f);
  const float dd = fp16_to_fp32(*d_out), dm = fp16_to_fp32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    const float d = dd * static_cast<float>(sc[j]);
    if (d == 0.0f) continue;  // keep the fitted codes; they dequantise to -min anyway
    const float mm = dm * static_cast<float>(m[j]);
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(clampi(nearest_int((x[32 * j + l] + mm) / d), 0, nmax));
  }
}

}  // namespace

void from_float_q4_K(const float* x, void* dst, int64_t n) {
  BlockQ4_K* b = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    fit_k_superblock(x, 15, -1.0f, 20, L, b[i].scales, &b[i].d, &b[i].dmin);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

void from_float_q5_K(const float* x, void* dst, int64_t n) {
  BlockQ5_K* b = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    fit_k_superblock(x, 31, -0.5f, 15, L, b[i].scales, &b[i].d, &b[i].dmin);
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        b[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
        b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

static void pack_q6_K(const int8_t* L, BlockQ6_K* b) {
  for (int h = 0; h < 2; ++h) {
    const int8_t* Lh = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
      b->ql[64 * h + l] = static_cast<uint8_t>((q0 & 0x0F) | ((q2 & 0x0F) << 4));
      b->ql[64 * h + l + 32] = static_cast<uint8_t>((q1 & 0x0F) | ((q3 & 0x0F) << 4));
      b->qh[32 * h + l] =
          static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
    }
  }
}

void from_float_q6_K(const float* x, void* dst, int64_t n) {
  BlockQ6_K* b = static_cast<BlockQ6_K*>(dst);
  int8_t L[kQK_K];
  float scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int g = 0; g < 16; ++g) {
      scales[g] = fit_scale_symmetric(16, 32, x + 16 * g, L + 16 * g);
      if (std::fabs(scales[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&b[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    b[i].d = fp32_to_fp16(1.0f / iscale);
    for (int g = 0; g < 16; ++g) b[i].scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    const float dd = fp16_to_fp32(b[i].d);
    for (int g = 0; g < 16; ++g) {
      const float d = dd * static_cast<float>(b[i].scales[g]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] = static_cast<int8_t>(clampi(nearest_int(x[16 * g + l] / d), -32, 31) + 32);
    }
    pack_q6_K(L, &b[i]);
  }
}

}  // namespace zenmoe::ref
