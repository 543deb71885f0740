// Reference numerics of the plain element types F32, F16 and BF16.
#include <cstring>

#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"

namespace zenmoe::ref {

void to_float_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void to_float_f16(const void* src, float* dst, int64_t n) {
  fp16_to_fp32_row(static_cast<const f16_t*>(src), dst, n);
}
void to_float_bf16(const void* src, float* dst, int64_t n) {
  bf16_to_fp32_row(static_cast<const bf16_t*>(src), dst, n);
}

void from_float_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void from_float_f16(const float* src, void* dst, int64_t n) {
  fp32_to_fp16_row(src, static_cast<f16_t*>(dst), n);
}
void from_float_bf16(const float* src, void* dst, int64_t n) {
  fp32_to_bf16_row(src, static_cast<bf16_t*>(dst), n);
}

float vec_dot_f32(const void* w, const void* x, int64_t n) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i] * b[i]);
  return static_cast<float>(sum);
}

float vec_dot_f16(const void* w, const void* x, int64_t n) {
  const f16_t* a = static_cast<const f16_t*>(w);
  const f16_t* b = static_cast<const f16_t*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(a[i]) * fp16_to_fp32(b[i]));
  return static_cast<float>(sum);
}

float vec_dot_bf16(const void* w, const void* x, int64_t n) {
  const bf16_t* a = static_cast<const bf16_t*>(w);
  const bf16_t* b = static_cast<const bf16_t*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(a[i]) * bf16_to_fp32(b[i]));
  return static_cast<float>(sum);
}

}  // namespace zenmoe::ref
