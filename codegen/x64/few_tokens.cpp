#include "codegen/x64/few_tokens.h"

#include <cstdint>

namespace zenmoe::x64 {

using namespace Xbyak;

Status FewTokensKernel::build() {
  for (int m = 1; m <= kFewMaxTokens; ++m) {
    align(64);
    entry_[m] = getSize();
    emit_pass(m);
  }
  ZENMOE_RETURN_IF_ERROR(seal());
  for (int m = 1; m <= kFewMaxTokens; ++m)
    fn_[m] = reinterpret_cast<PassFn>(reinterpret_cast<uintptr_t>(getCode() + entry_[m]));
  return Status::ok();
}

void FewTokensKernel::run(const GemvCall& c) const {
  FewPassCall p;
  p.w = c.w;
  p.r0 = c.r0;
  p.r1 = c.r1;
  p.x[0] = static_cast<const uint8_t*>(c.x);
  p.y[0] = c.y;
  p.alpha[0] = c.alpha;
  fn_[1](&p);
}

void FewTokensKernel::run_gemm(const GemmCall& c) const {
  const int64_t passes = (c.n + kFewMaxTokens - 1) / kFewMaxTokens;
  for (int64_t i = 0, t = 0; i < passes; ++i) {
    const int64_t left = c.n - t, m = (left + (passes - i) - 1) / (passes - i);
    FewPassCall p;
    p.w = c.w;
    p.r0 = c.r0;
    p.r1 = c.r1;
    for (int64_t j = 0; j < m; ++j, ++t) {
      p.x[j] = gemm_x_row(c, t);
      p.y[j] = gemm_y_row(c, t);
      p.alpha[j] = c.alpha != nullptr ? c.alpha[t] : 1.0f;
    }
    fn_[m](&p);
  }
}

void FewTokensKernel::store_token(int t, const Reg64& first_row, const Zmm& sums, const Zmm& tmp) {
  mov(r11, qword[rdi + kPY + 8 * t]);
  lea(r11, ptr[r11 + first_row * 4]);
  if (acc_) {
    vmovups(tmp | k2 | T_z, ptr[r11]);
    vfmadd231ps(tmp, sums, ptr_b[rdi + kPAlpha + 4 * t]);
    vmovups(ptr[r11] | k2, tmp);
  } else {
    vmovups(ptr[r11] | k2, sums);
  }
}

}  // namespace zenmoe::x64
