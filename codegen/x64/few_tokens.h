// Shared frame of the few-token GEMV kernels (gemv_*_few_avx512.cpp): one generated function
// per pass size m = 1..kFewMaxTokens, each computing m tokens' rows in one walk over the
// weights, and the C++ side that cuts a GemmCall into such passes. A format supplies
// emit_pass(m); every token's outputs must be the bits its GEMV kernel gives that token alone.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codegen/x64/jit_base.h"

namespace zenmoe::x64 {

inline constexpr int kFewMaxTokens = 4;

// One pass. w, r0 and r1 sit where GemvCall has them (the base's row-bound helpers read them).
struct FewPassCall {
  const uint8_t* w = nullptr;
  const void* unused_x = nullptr;
  void* unused_y = nullptr;
  int64_t r0 = 0, r1 = 0;
  const uint8_t* x[kFewMaxTokens] = {};
  float* y[kFewMaxTokens] = {};
  float alpha[kFewMaxTokens] = {};
};
static_assert(offsetof(FewPassCall, w) == 0 && offsetof(FewPassCall, r0) == 24 && offsetof(FewPassCall, r1) == 32);

class FewTokensKernel : public JitKernelBase {
 public:
  FewTokensKernel(const KernelDesc& d, size_t max_bytes)
      : JitKernelBase(max_bytes, d.prefetch_hint), d_(d), acc_(d.op == KernelOp::kGemvAccumulate) {}
  // Emits the passes and makes the buffer executable.
  Status build();
  // One token: a pass of one.
  void run(const GemvCall& c) const override;
  // Passes of at most kFewMaxTokens tokens, as even as they can be (7 = 4 + 3, 9 = 3 + 3 + 3).
  void run_gemm(const GemmCall& c) const override;
  bool several_tokens() const override { return true; }

 protected:
  static constexpr int kPX = offsetof(FewPassCall, x), kPY = offsetof(FewPassCall, y),
                       kPAlpha = offsetof(FewPassCall, alpha);
  virtual void emit_pass(int m) = 0;
  // Token t's lanes of `sums` (the group's rows, from row `first_row`, a register) to its y,
  // rows inside [r0, r1) under the k2 mask, as JitKernelBase::store_lanes writes a GEMV's
  // (y += alpha_t * sums when accumulating). Clobbers r11 and `tmp`.
  void store_token(int t, const Xbyak::Reg64& first_row, const Xbyak::Zmm& sums, const Xbyak::Zmm& tmp);

  KernelDesc d_;
  bool acc_;

 private:
  using PassFn = void (*)(const FewPassCall*);
  size_t entry_[kFewMaxTokens + 1] = {};
  PassFn fn_[kFewMaxTokens + 1] = {};
};

}  // namespace zenmoe::x64
