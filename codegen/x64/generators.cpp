#include "codegen/x64/generators.h"
#include "codegen/x64/swiglu_q8k.h"

#include <xbyak/xbyak.h>

#include <string>

#include "kernels/ref/ops.h"
#include "kernels/ref/quant.h"

namespace zenmoe::x64 {

Expected<std::unique_ptr<KernelCode>> generate_gemv_q4k_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_q4k_avx2(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_rows16_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_q6k_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_q5k_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_q80_avx2(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_q6k_avx2(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_q40_avx2(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_q5k_avx2(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemv_plain_avx2(const KernelDesc& d);

namespace {

Expected<std::unique_ptr<KernelCode>> dispatch(const KernelDesc& d) {
  const bool avx512 = d.isa >= isa::IsaLevel::kAvx512;
  if (d.weight == GgmlType::Q4_K && avx512) return generate_gemv_q4k_avx512(d);
  if (d.op == KernelOp::kGateUpSwiglu && !avx512)
    return Error{canonical_name(d) + ": fused gate+up+SwiGLU has AVX-512 and scalar kernels only"};
  if (d.weight == GgmlType::Q4_K && d.isa == isa::IsaLevel::kAvx2) return generate_gemv_q4k_avx2(d);
  if (d.weight == GgmlType::Q6_K && d.isa >= isa::IsaLevel::kAvx512Vnni) return generate_gemv_q6k_avx512(d);
  if (d.weight == GgmlType::Q5_K && d.isa >= isa::IsaLevel::kAvx512Vnni) return generate_gemv_q5k_avx512(d);
  // AVX-512 without VNNI runs the AVX2 Q6_K, Q5_K, Q8_0 and Q4_0 kernels (vpmaddubsw at either width).
  if (d.weight == GgmlType::Q6_K && d.isa <= isa::IsaLevel::kAvx512) return generate_gemv_q6k_avx2(d);
  if (d.weight == GgmlType::Q5_K && d.isa <= isa::IsaLevel::kAvx512) return generate_gemv_q5k_avx2(d);
  if (d.weight == GgmlType::Q4_0 && d.isa <= isa::IsaLevel::kAvx512) return generate_gemv_q40_avx2(d);
  if (d.weight == GgmlType::Q8_0 && d.isa <= isa::IsaLevel::kAvx512) return generate_gemv_q80_avx2(d);
  // From VNNI up Q4_0, Q5_0 and Q8_0 use vpdpbusd on the unsigned codes (the AVX-512 rows16
  // kernel); below VNNI, Q5_0 weights are packed as Q8_0 (runtime/compiled_model.cpp).
  if ((is_block32_format(d.weight) && d.isa >= isa::IsaLevel::kAvx512Vnni) || (is_plain_format(d.weight) && avx512))
    return generate_gemv_rows16_avx512(d);
  if (is_plain_format(d.weight) && d.isa == isa::IsaLevel::kAvx2) return generate_gemv_plain_avx2(d);
  return Error{canonical_name(d) + ": no xbyak generator for this format and ISA level"};
}

}  // namespace

void swiglu_quantize_q8k(const float* gu, void* q8k_block) {
  float h[256];
  for (int r = 0; r < 256; ++r) h[r] = swiglu_approx(gu[2 * r], gu[2 * r + 1]);
  ref::quantize_row(GgmlType::Q8_K, h, q8k_block, 256);
}

std::vector<isa::IsaLevel> generated_levels(GgmlType weight) {
  using isa::IsaLevel;
  if (weight == GgmlType::Q4_K) return {IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAvx512Vnni, IsaLevel::kAvx512Bf16};
  if (weight == GgmlType::Q8_0 || weight == GgmlType::Q6_K || weight == GgmlType::Q4_0 || weight == GgmlType::Q5_K)
    return {IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAvx512Vnni, IsaLevel::kAvx512Bf16};
  if (is_plain_format(weight))
    return {IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAvx512Vnni, IsaLevel::kAvx512Bf16};
  if (weight == GgmlType::Q5_0) return {IsaLevel::kAvx512Vnni, IsaLevel::kAvx512Bf16};
  return {};
}

Expected<std::unique_ptr<KernelCode>> generate_gemv(const KernelDesc& d) {
  // xbyak reports encoding problems (code buffer too small, bad operand) by exception;
  // none may escape the library.
  try {
    return dispatch(d);
  } catch (const Xbyak::Error& e) {
    return Error{instance_name(d) + ": code generation failed: " + e.what()};
  } catch (const std::exception& e) {
    return Error{instance_name(d) + ": code generation failed: " + e.what()};
  }
}

}  // namespace zenmoe::x64
