// The decode kernels over Q8_0 cache rows (runtime/kv_q8.h) against plain loops over the
// dequantised rows, for every head count the blocking splits differently (groups of 16 and 8
// heads, each remainder), odd and even cache row counts, padded score rows and row strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "codegen/isa.h"
#include "kernels/formats.h"
#include "kernels/ref/quant.h"
#include "runtime/kv_q8.h"

namespace zenmoe {
namespace {

std::vector<float> normals(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void check(int64_t heads, int64_t n_rows, int64_t width, int64_t v_width) {
  const int64_t rb = row_bytes(GgmlType::Q8_0, width), row_stride = rb + 6;  // rows padded apart
  const std::vector<float> x = normals(static_cast<size_t>(n_rows * width), 7u + static_cast<unsigned>(n_rows));
  std::vector<uint8_t> rows(static_cast<size_t>(n_rows * row_stride));
  std::vector<float> deq(x.size());
  for (int64_t j = 0; j < n_rows; ++j) {
    kv_q8_0_store_row(x.data() + j * width, rows.data() + j * row_stride, width);
    ref::to_float_q8_0(rows.data() + j * row_stride, deq.data() + j * width, width);
  }
  const std::vector<float> q = normals(static_cast<size_t>(heads * width), 11u + static_cast<unsigned>(heads));
  const int64_t ld = n_rows + 3;  // score rows padded apart
  std::vector<float> s(static_cast<size_t>(heads * ld), -7.0f);
  kv_q8_0_scores_avx512(q.data(), heads, rows.data(), row_stride, n_rows, width, s.data(), ld);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < n_rows; ++j) {
      double want = 0.0, mag = 0.0;
      for (int64_t i = 0; i < width; ++i) {
        want += double(q[h * width + i]) * deq[j * width + i];
        mag += std::fabs(double(q[h * width + i]) * deq[j * width + i]);
      }
      ASSERT_NEAR(s[h * ld + j], want, 1e-6 * mag) << "scores heads=" << heads << " h=" << h << " j=" << j;
    }
    for (int64_t j = n_rows; j < ld; ++j) ASSERT_EQ(s[h * ld + j], -7.0f) << "padding overwritten";
  }
  const std::vector<float> p = normals(static_cast<size_t>(heads * ld), 13u);
  std::vector<float> y(static_cast<size_t>(heads * v_width));
  kv_q8_0_values_avx512(p.data(), ld, heads, rows.data(), row_stride, n_rows, v_width, y.data());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < v_width; ++i) {
      double want = 0.0, mag = 0.0;
      for (int64_t j = 0; j < n_rows; ++j) {
        want += double(p[h * ld + j]) * deq[j * width + i];
        mag += std::fabs(double(p[h * ld + j]) * deq[j * width + i]);
      }
      ASSERT_NEAR(y[h * v_width + i], want, 1e-6 * mag) << "values heads=" << heads << " h=" << h << " i=" << i;
    }
}

TEST(KvQ8Kernels, MatchPlainLoopsForEveryHeadBlocking) {
  // The kernels are AVX-512 only; hosts without it never call them (MlaOp checks the target).
  if (!isa::host_supports(isa::IsaLevel::kAvx512)) return;
  for (int64_t heads : {1, 2, 3, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 33})
    for (int64_t n_rows : {1, 2, 5, 40}) check(heads, n_rows, 96, 64);
  check(16, 37, 576, 512);
  // Values run in tiles of 128 rows and prefetch a tile ahead: several tiles, a partial last one.
  check(16, 300, 576, 512);
  check(5, 257, 96, 64);
  check(24, 129, 96, 64);
}

}  // namespace
}  // namespace zenmoe
