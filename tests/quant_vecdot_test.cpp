// Reference dot products: the integer parts exactly (blocks built with unit scales so every
// float is a small integer), and agreement with the dot of the dequantised rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/kscales.h"
#include "kernels/ref/quant.h"

namespace zenmoe::ref {
namespace {

constexpr f16_t kOne = 0x3C00;

// Q8_K activations with d = 1 and codes in [-lim, lim], bsums filled in.
std::vector<BlockQ8_K> unit_q8k(int nb, int lim, std::mt19937& rng) {
  std::vector<BlockQ8_K> q(static_cast<size_t>(nb));
  std::uniform_int_distribution<int> code(-lim, lim);
  for (auto& b : q) {
    b.d = 1.0f;
    for (auto& v : b.qs) v = static_cast<int8_t>(code(rng));
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int k = 0; k < 16; ++k) s += b.qs[16 * g + k];
      b.bsums[g] = static_cast<int16_t>(s);
    }
  }
  return q;
}

std::vector<BlockQ8_0> unit_q80(int nb, std::mt19937& rng) {
  std::vector<BlockQ8_0> q(static_cast<size_t>(nb));
  std::uniform_int_distribution<int> code(-127, 127);
  for (auto& b : q) {
    b.d = kOne;
    for (auto& v : b.qs) v = static_cast<int8_t>(code(rng));
  }
  return q;
}

void random_bytes(void* p, size_t n, std::mt19937& rng) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(rng());
}

// Exact Σ w_i x_i over the integer-valued dequantised rows.
template <class W, class X>
int64_t exact_dot(GgmlType wt, const std::vector<W>& w, GgmlType xt, const std::vector<X>& x, int64_t n) {
  std::vector<float> wf(static_cast<size_t>(n)), xf(static_cast<size_t>(n));
  dequantize_row(wt, w.data(), wf.data(), n);
  dequantize_row(xt, x.data(), xf.data(), n);
  int64_t s = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(wf[i], std::trunc(wf[i]));  // the construction keeps every value integral
    s += static_cast<int64_t>(wf[i]) * static_cast<int64_t>(xf[i]);
  }
  return s;
}

TEST(VecDotExact, LegacyFormatsWithQ8_0) {
  std::mt19937 rng(1);
  const int nb = 8, n = nb * 32;
  const auto x = unit_q80(nb, rng);
  std::vector<BlockQ4_0> w4(nb);
  std::vector<BlockQ5_0> w5(nb);
  std::vector<BlockQ8_0> w8(nb);
  random_bytes(w4.data(), w4.size() * sizeof(BlockQ4_0), rng);
  random_bytes(w5.data(), w5.size() * sizeof(BlockQ5_0), rng);
  random_bytes(w8.data(), w8.size() * sizeof(BlockQ8_0), rng);
  for (int i = 0; i < nb; ++i) w4[i].d = w5[i].d = w8[i].d = kOne;
  EXPECT_EQ(vec_dot_row(GgmlType::Q4_0, w4.data(), x.data(), n),
            static_cast<float>(exact_dot(GgmlType::Q4_0, w4, GgmlType::Q8_0, x, n)));
  EXPECT_EQ(vec_dot_row(GgmlType::Q5_0, w5.data(), x.data(), n),
            static_cast<float>(exact_dot(GgmlType::Q5_0, w5, GgmlType::Q8_0, x, n)));
  EXPECT_EQ(vec_dot_row(GgmlType::Q8_0, w8.data(), x.data(), n),
            static_cast<float>(exact_dot(GgmlType::Q8_0, w8, GgmlType::Q8_0, x, n)));
}

// Q4_K / Q5_K exercise the bsums min term: with d = dmin = 1 the dot is Σ (sc*q - m) * q8.
TEST(VecDotExact, KQuantsWithQ8_K) {
  std::mt19937 rng(2);
  const int nb = 3, n = nb * 256;
  const auto x = unit_q8k(nb, 15, rng);
  std::vector<BlockQ4_K> w4(nb);
  std::vector<BlockQ5_K> w5(nb);
  std::vector<BlockQ6_K> w6(nb);
  std::vector<BlockIQ4_XS> wi(nb);
  random_bytes(w4.data(), w4.size() * sizeof(BlockQ4_K), rng);
  random_bytes(w5.data(), w5.size() * sizeof(BlockQ5_K), rng);
  random_bytes(w6.data(), w6.size() * sizeof(BlockQ6_K), rng);
  random_bytes(wi.data(), wi.size() * sizeof(BlockIQ4_XS), rng);
  for (int i = 0; i < nb; ++i) {
    w4[i].d = w4[i].dmin = w5[i].d = w5[i].dmin = w6[i].d = wi[i].d = kOne;
  }
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    int64_t want = 0;
    float got = 0;
    switch (t) {
      case GgmlType::Q4_K: want = exact_dot(t, w4, GgmlType::Q8_K, x, n); got = vec_dot_row(t, w4.data(), x.data(), n); break;
      case GgmlType::Q5_K: want = exact_dot(t, w5, GgmlType::Q8_K, x, n); got = vec_dot_row(t, w5.data(), x.data(), n); break;
      case GgmlType::Q6_K: want = exact_dot(t, w6, GgmlType::Q8_K, x, n); got = vec_dot_row(t, w6.data(), x.data(), n); break;
      default: want = exact_dot(t, wi, GgmlType::Q8_K, x, n); got = vec_dot_row(t, wi.data(), x.data(), n); break;
    }
    ASSERT_LT(std::llabs(want), int64_t{1} << 24) << "test construction must stay float-exact";
    EXPECT_EQ(got, static_cast<float>(want)) << type_name(t);
  }
}

// The min term really comes from bsums (as in ggml): bsums that disagree with the codes
// change the result by exactly -dmin * d8 * Σ_g Δbsums[g] * m[g/2].
TEST(VecDotExact, Q4_KMinTermUsesBsums) {
  std::mt19937 rng(3);
  auto x = unit_q8k(1, 15, rng);
  BlockQ4_K w;
  random_bytes(&w, sizeof w, rng);
  w.d = w.dmin = kOne;
  const float base = vec_dot_row(GgmlType::Q4_K, &w, x.data(), 256);
  x[0].bsums[5] = static_cast<int16_t>(x[0].bsums[5] + 1);
  uint8_t sc, m;
  kscale_get(w.scales, 5 / 2, &sc, &m);
  EXPECT_EQ(vec_dot_row(GgmlType::Q4_K, &w, x.data(), 256), base - static_cast<float>(m));
}

std::vector<float> normal(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = dist(rng);
  return v;
}

// vec_dot(w, quant(x)) equals the dot of the dequantised rows up to float summation error.
TEST(VecDotFloat, MatchesDequantisedDot) {
  for (int64_t n : {256, 2048, 7168}) {
    const auto wf = normal(n, 10), xf = normal(n, 20);
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                       GgmlType::Q6_K, GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
      const FormatTraits* tr = format_traits(t);
      std::vector<uint8_t> w(static_cast<size_t>(row_bytes(t, n)));
      std::vector<uint8_t> xq(static_cast<size_t>(row_bytes(tr->vec_dot_type, n)));
      quantize_row(t, wf.data(), w.data(), n);
      quantize_row(tr->vec_dot_type, xf.data(), xq.data(), n);
      std::vector<float> wd(static_cast<size_t>(n)), xd(static_cast<size_t>(n));
      dequantize_row(t, w.data(), wd.data(), n);
      dequantize_row(tr->vec_dot_type, xq.data(), xd.data(), n);
      double want = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        want += static_cast<double>(wd[i]) * xd[i];
        mag += std::fabs(static_cast<double>(wd[i]) * xd[i]);
      }
      const float got = vec_dot_row(t, w.data(), xq.data(), n);
      EXPECT_NEAR(got, want, 2e-6 * mag) << type_name(t) << " n=" << n;
      EXPECT_EQ(vec_dot_row_f32(t, w.data(), xf.data(), n), got) << type_name(t);
      if (t == GgmlType::F16 || t == GgmlType::BF16) {
        EXPECT_EQ(got, static_cast<float>(want)) << "exact products summed in double, same order";
      }
    }
  }
}

// Spec §2.12: against the unquantised activations the only systematic error is the Q8_K
// rounding, bounded by Σ |w_i| * |d8(block of i)| / 2.
TEST(VecDotFloat, Q4_KActivationErrorBound) {
  const int64_t n = 2048;
  const auto wf = normal(n, 30), xf = normal(n, 40);
  std::vector<BlockQ4_K> w(n / 256);
  std::vector<BlockQ8_K> xq(n / 256);
  quantize_row(GgmlType::Q4_K, wf.data(), w.data(), n);
  quantize_row(GgmlType::Q8_K, xf.data(), xq.data(), n);
  std::vector<float> wd(n);
  dequantize_row(GgmlType::Q4_K, w.data(), wd.data(), n);
  double exact = 0, bound = 0;
  for (int64_t i = 0; i < n; ++i) {
    exact += static_cast<double>(wd[i]) * xf[i];
    bound += std::fabs(wd[i]) * std::fabs(xq[i / 256].d) / 2;
  }
  EXPECT_LE(std::fabs(vec_dot_row(GgmlType::Q4_K, w.data(), xq.data(), n) - exact), bound * 1.001);
}

}  // namespace
}  // namespace zenmoe::ref
