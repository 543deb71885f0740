// Shared emission for the AVX2 GEMV kernels over the row-block-16 layouts of kernels/pack.h:
// a group's 16 rows are two ymm halves (rows 0-7 and 8-15), lane = row, so like the
// AVX-512 kernels no horizontal reduction is needed. The skeleton (frame, empty-range exit,
// group loop, write-back of the two accumulator halves) lives here; each format supplies
// the once-per-call preparation and the body that runs over one group's weights.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "codegen/x64/jit_base.h"

namespace zenmoe::x64 {

// Emits rCnt-counted loops and the per-call Q8_0 activation sums; usable by any generator.
// Q8_0 activation blocks (34 bytes, nb of them at `x`): writes 8 bytes per block at `scr`,
// bias * sum(q) as int32 and d as f32. Clobbers eax, edx, ymm12-ymm15, x, scr and cnt.
void emit_q80_sums(Xbyak::CodeGenerator& g, const Xbyak::Reg64& x, const Xbyak::Reg64& scr,
                   const Xbyak::Reg64& cnt, int64_t nb, int bias);

class Avx2Rows16Kernel : public JitKernelBase {
 public:
  explicit Avx2Rows16Kernel(const KernelDesc& d)
      : JitKernelBase(64 * 1024, d.prefetch_hint), d_(d), acc_(d.op == KernelOp::kGemvAccumulate) {}

 protected:
  static constexpr int kRows = 16;
  // Fixed by the skeleton. r9, r11, r14, rsi and ymm0-ymm13 are free for the format body
  // (write_rows clobbers ymm0-2 and r11 only after the body).
  const Xbyak::Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rP = r13, rPx = r15, rScr = r8, rCnt = r10;
  const Xbyak::Ymm yAcc[2] = {ymm14, ymm15};

  // The whole kernel: `scratch_bytes` of 64-byte aligned stack for prep(); per group,
  // rP = w + group * group_stride, rPx = x, rScr = rsp, yAcc zero, then group_body().
  void emit_kernel(int64_t scratch_bytes, int64_t group_stride);
  virtual void prep() {}
  virtual void group_body() = 0;
  // body() `n` times (n >= 1) on the rCnt counter.
  void repeat(int64_t n, const std::function<void()>& body);
  // body(parity) for blocks 0..n-1 (Q8_0 / Q4_0 records, kernels/pack.h): an even and an
  // odd block per iteration, an odd count's last block after the loop.
  void repeat_blocks(int64_t n, const std::function<void(int)>& body);
  void broadcast_const(const Xbyak::Ymm& y, uint32_t v);
  // (v, v) int16 pairs per dword lane from 8 unsigned bytes at `src` (for vpmaddwd).
  void byte_pairs(const Xbyak::Ymm& dst, const Xbyak::Address& src, const Xbyak::Ymm& tmp);
  // yAcc[h] += float(isum) * (f16 row scales at d_f16 * dx); isum becomes float, tmp clobbered.
  void add_scaled_block(int h, const Xbyak::Ymm& isum, const Xbyak::Address& d_f16, const Xbyak::Ymm& dx,
                        const Xbyak::Ymm& tmp);

  KernelDesc d_;
  bool acc_;
};

// Seals a generated kernel and hands it out as KernelCode.
template <class K>
Expected<std::unique_ptr<KernelCode>> finish_kernel(std::unique_ptr<K> k) {
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
